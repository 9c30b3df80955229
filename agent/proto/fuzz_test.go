package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame decoder, the first
// thing that reads what a peer sends. Properties:
//   - it never panics, and fails only with the documented errors: io.EOF
//     (nothing to read), io.ErrUnexpectedEOF (a truncated header or body),
//     ErrFrameTooLarge, ErrParse;
//   - a length above MaxFrameSize is refused after the 4-byte header,
//     before anything is allocated for the body (what bounds the memory a
//     peer can make the agent allocate);
//   - a decoded frame re-encodes to exactly the bytes it was read from;
//   - a frame whose JSON decodes re-encodes (EncodeFrame) to bytes that
//     decode to the same frame.
func FuzzReadFrame(f *testing.F) {
	for _, fr := range []*Frame{
		{ID: 1, Method: MethodPing, Params: []byte(`{}`)},
		{ID: 7, Result: []byte(`{"content":[{"type":"text","text":"hi"}]}`)},
		{Method: MethodStream, Params: []byte(`{"id":7,"seq":1}`), Data: []byte("output\n")},
		{ID: 3, Error: &Error{Code: CodeBadArchive, Message: "invalid archive"}},
		{Method: MethodCancel, Params: []byte(`{"id":2}`), Data: []byte{}},
	} {
		b, err := EncodeFrame(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1]) // truncated
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0})                                  // a truncated header
	f.Add([]byte{0, 0, 0, 0})                            // an empty body
	f.Add([]byte{0x02, 0, 0, 1})                         // above MaxFrameSize
	f.Add([]byte{0x80, 0, 0, 2, 0, 0})                   // binary, no room for the JSON length
	f.Add([]byte{0x80, 0, 0, 5, 0, 0, 0, 9, '{'})        // binary, JSON length beyond the body
	f.Add([]byte("Error: no such container\n"))          // stray text on the stream
	f.Add([]byte{0, 0, 0, 2, '{', '}', 0, 0, 0, 2, '['}) // a frame, then a partial one

	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var hdr [HeaderSize]byte
		body, data, err := ReadFrame(r, &hdr)
		consumed := len(in) - r.Len()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
				!errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrParse) {
				t.Fatalf("undocumented error: %v", err)
			}
			if errors.Is(err, ErrFrameTooLarge) && consumed != HeaderSize {
				t.Fatalf("an oversized frame read %d bytes past its header", consumed-HeaderSize)
			}
			return
		}
		if len(body)+len(data) > MaxFrameSize {
			t.Fatalf("a frame of %d bytes passed the %d limit", len(body)+len(data), MaxFrameSize)
		}
		if got := rewire(body, data); !bytes.Equal(got, in[:consumed]) {
			t.Fatalf("re-encoded % x, read from % x", got, in[:consumed])
		}

		var fr Frame
		if json.Unmarshal(body, &fr) != nil {
			return // the read loop reports it as CodeParse and goes on
		}
		fr.Data = data
		once, err := EncodeFrame(&fr)
		if err != nil {
			return // too large once re-encoded (JSON escapes grow)
		}
		body2, data2, err := ReadFrame(bytes.NewReader(once), &hdr)
		if err != nil {
			t.Fatalf("EncodeFrame wrote a frame ReadFrame refuses: %v", err)
		}
		var fr2 Frame
		if err := json.Unmarshal(body2, &fr2); err != nil {
			t.Fatalf("EncodeFrame wrote JSON that does not decode: %v", err)
		}
		fr2.Data = data2
		twice, err := EncodeFrame(&fr2)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("a frame does not survive a round trip: %q -> %q (%v)", once, twice, err)
		}
	})
}

// rewire is the wire form of what ReadFrame returned.
func rewire(body, data []byte) []byte {
	var b []byte
	if data == nil {
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		return append(b, body...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(body)+len(data))|BinaryFlag)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	return append(b, data...)
}
