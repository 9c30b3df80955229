// Package inject puts the daemon's secrets into requests on their way out
// of a sandbox, so the sandbox never holds them (decision 0051).
//
// A profile's inject rules name a host, a header and a value with
// ${NAME} references to the daemon's secrets (Rule, Template). The
// sandbox holds a placeholder per secret (Authority.Placeholder) in the
// environment variable of the secret's name. The egress proxy hands a TLS
// connection to a host with rules to the session's Injector (its
// Interceptor): the Injector terminates TLS with a leaf certificate of the
// daemon's CA (Authority; the sandbox trusts it), reads each HTTP/1.1
// request, sets the rules' headers and replaces the placeholders of that
// host's secrets in every header, and sends the request on over a new TLS
// connection that verifies the real host's certificate. A request to any
// other host is never seen here: its placeholder leaves as it is.
//
// The package imports nothing of sandboxd: the proxy (sandbox/egress)
// calls it through its Interceptor interface.
package inject
