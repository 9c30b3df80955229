// Package skill serves a session's skills as tools, inside the sandbox:
// load_skill (progressive disclosure: the catalog of skills in its
// description, a skill's SKILL.md body, folder and list of files on a call)
// and one tool per executable skill (a script plus ## Parameters), which
// runs the script with an argv built from the call's arguments.
//
// The skills are mounted read-only at /skills/<path> (MountDir); the
// factory "skills" loads them from there with skills.Load. Definitions is
// pure, so the daemon lists the same tools from its own copy of the skills
// without a sandbox.
//
// A call of a skill tool:
//   - the arguments are validated against the tool's input schema (the
//     tool framework), then turned into an argv by Argv: the interpreter
//     by the script's extension, positional arguments, then --options and
//     flags; never a shell string, so an argument "; rm -rf /workspace" is
//     one argv element, and a positional value starting with '-' is refused
//     (a script would read it as an option);
//   - the skill's dependency installer runs first if it has not yet run in
//     this session (once: a lock per skill, a marker under the state
//     directory; a failure is sticky for the session);
//   - the script runs in the workspace with the agent's environment,
//     SKILL_DIR set to the skill's folder and $HOME/.local/bin first on
//     PATH, in a session (process group) of its own that is killed whole
//     on timeout, cancellation, and when the script exits (a skill that
//     wants something to outlive its call starts it with setsid);
//   - its output is streamed while it runs and capped as the terminal caps
//     it (tools/internal/output); the result has the text, the exit code,
//     and with returns_json the stdout parsed as structured content.
package skill
