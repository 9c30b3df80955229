package fileeditor

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// encoding is how a file's bytes map to text. Every encoding here round-trips:
// decoding and re-encoding a file that was read without error gives back the
// same bytes, so the parts of a file an edit does not touch stay byte-identical.
type encoding int

const (
	encUTF8 encoding = iota
	encUTF8BOM
	encUTF16LE // with BOM
	encUTF16BE // with BOM
	encWindows1252
	encWindows1251
	encUTF8Escaped // UTF-8 with a few invalid bytes, each kept as an escape rune
)

// escapeBase maps an invalid byte b (0x80-0xFF) of a mostly-UTF-8 file to
// the rune escapeBase+b, U+10FF80-U+10FFFF (the end of a private use
// plane, which text does not use), and back when the file is written.
const escapeBase = 0x10FF00

func (e encoding) String() string {
	switch e {
	case encUTF8:
		return "utf-8"
	case encUTF8BOM:
		return "utf-8 with BOM"
	case encUTF16LE:
		return "utf-16le with BOM"
	case encUTF16BE:
		return "utf-16be with BOM"
	case encWindows1252:
		return "windows-1252 (latin-1)"
	case encWindows1251:
		return "windows-1251"
	case encUTF8Escaped:
		return "utf-8 with invalid bytes (each shown as a character U+10FF80-U+10FFFF and written back as it was)"
	}
	return fmt.Sprintf("encoding(%d)", int(e))
}

var (
	bomUTF8    = []byte{0xEF, 0xBB, 0xBF}
	bomUTF16LE = []byte{0xFF, 0xFE}
	bomUTF16BE = []byte{0xFE, 0xFF}
)

// binarySample is how much of a file the binary check looks at (as git does).
const binarySample = 8000

// errBinary reports content that is not text in any encoding we handle.
type errBinary struct{ reason string }

func (e errBinary) Error() string { return e.reason }

// detectEncoding decides how to read b. It is a pragmatic detector, not a
// statistical one:
//
//  1. A byte-order mark wins: UTF-8, UTF-16LE or UTF-16BE.
//  2. A NUL byte, or mostly control characters, in the first 8000 bytes means
//     binary (UTF-16 without a BOM is therefore treated as binary).
//  3. Valid UTF-8 (ASCII included) is UTF-8.
//  4. UTF-8 with a few invalid bytes (no more than its valid multi-byte
//     characters) is UTF-8 whose invalid bytes are escaped (see escapeBase):
//     one stray byte must not turn every "é" of a file into "Ã©".
//  5. Anything else is a single-byte code page. Windows-1251 (Cyrillic) is
//     chosen when words made only of bytes >= 0xC0 (Cyrillic letters there)
//     outnumber words mixing such bytes with ASCII letters (accented Latin
//     letters inside Latin words: "café", "Größe"); otherwise Windows-1252,
//     a superset of the printable part of Latin-1.
//
// Both code pages map all 256 byte values (undefined ones to the C1 control of
// the same value), so even a misdetected or mixed file is written back
// byte-for-byte outside the edited region.
func detectEncoding(b []byte) (encoding, error) {
	switch {
	case bytes.HasPrefix(b, bomUTF8):
		if !utf8.Valid(b[len(bomUTF8):]) {
			return 0, errBinary{"it starts with a UTF-8 byte-order mark but is not valid UTF-8"}
		}
		return encUTF8BOM, nil
	case bytes.HasPrefix(b, bomUTF16LE), bytes.HasPrefix(b, bomUTF16BE):
		if len(b)%2 != 0 {
			return 0, errBinary{"it starts with a UTF-16 byte-order mark but has an odd number of bytes"}
		}
		if bytes.HasPrefix(b, bomUTF16LE) {
			return encUTF16LE, nil
		}
		return encUTF16BE, nil
	}
	sample := b[:min(len(b), binarySample)]
	if i := bytes.IndexByte(sample, 0); i >= 0 {
		return 0, errBinary{"it contains NUL bytes"}
	}
	ctl := 0
	for _, c := range sample {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != 0x1b && c != '\b' {
			ctl++
		}
	}
	if len(sample) > 0 && ctl*10 > len(sample) {
		return 0, errBinary{"it consists mostly of control characters"}
	}
	if utf8.Valid(b) {
		return encUTF8, nil
	}
	if mostlyUTF8(b) {
		return encUTF8Escaped, nil
	}
	if looksCyrillic(b) {
		return encWindows1251, nil
	}
	return encWindows1252, nil
}

// mostlyUTF8 reports whether b has valid multi-byte UTF-8 characters, at
// least as many as invalid bytes, and no rune of the escape range (which
// could not be told from an escaped byte).
func mostlyUTF8(b []byte) bool {
	multi, invalid := 0, 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			invalid++
		case r >= escapeBase+0x80:
			return false
		case size > 1:
			multi++
		}
		b = b[size:]
	}
	return multi > 0 && multi >= invalid
}

// looksCyrillic votes word by word; see detectEncoding.
func looksCyrillic(b []byte) bool {
	cyr, lat := 0, 0
	high, ascii := 0, 0
	flush := func() {
		switch {
		case high > 0 && ascii > 0:
			lat++
		case high >= 2:
			cyr++
		}
		high, ascii = 0, 0
	}
	for _, c := range b {
		switch {
		case c >= 0xC0 || c == 0xA8 || c == 0xB8: // letters in both pages (Ё ё in 1251)
			high++
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			ascii++
		default:
			flush()
		}
	}
	flush()
	return cyr > lat
}

// decode turns b into text. It fails only for UTF-16 that is not valid
// (an unpaired surrogate), which could not be written back unchanged.
func decode(b []byte, enc encoding) (string, error) {
	switch enc {
	case encUTF8:
		return string(b), nil
	case encUTF8BOM:
		return string(b[len(bomUTF8):]), nil
	case encUTF8Escaped:
		var sb strings.Builder
		sb.Grow(len(b) + 8)
		for len(b) > 0 {
			r, size := utf8.DecodeRune(b)
			if r == utf8.RuneError && size == 1 {
				sb.WriteRune(escapeBase + rune(b[0]))
			} else {
				sb.Write(b[:size])
			}
			b = b[size:]
		}
		return sb.String(), nil
	case encUTF16LE, encUTF16BE:
		b = b[2:]
		u := make([]uint16, len(b)/2)
		for i := range u {
			if enc == encUTF16LE {
				u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
			} else {
				u[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
			}
		}
		for i := 0; i < len(u); i++ {
			switch {
			case utf16.IsSurrogate(rune(u[i])) && u[i] < 0xDC00 && i+1 < len(u) && u[i+1] >= 0xDC00 && u[i+1] <= 0xDFFF:
				i++
			case utf16.IsSurrogate(rune(u[i])):
				return "", errBinary{fmt.Sprintf("it is not valid UTF-16 (unpaired surrogate at byte %d)", 2+2*i)}
			}
		}
		s := string(utf16.Decode(u))
		if strings.IndexByte(s, 0) >= 0 {
			return "", errBinary{"it starts with a UTF-16 byte-order mark but contains NUL characters"}
		}
		return s, nil
	case encWindows1252, encWindows1251:
		table := &cp1252
		if enc == encWindows1251 {
			table = &cp1251
		}
		var sb bytes.Buffer
		sb.Grow(len(b) + len(b)/4)
		for _, c := range b {
			if c < 0x80 {
				sb.WriteByte(c)
			} else {
				sb.WriteRune(rune(table[c-0x80]))
			}
		}
		return sb.String(), nil
	}
	return "", fmt.Errorf("fileeditor: unknown encoding %d", enc)
}

// errUnencodable lists characters the file's encoding cannot hold.
type errUnencodable struct {
	enc   encoding
	runes []rune
}

func (e errUnencodable) Error() string {
	var sb bytes.Buffer
	for i, r := range e.runes {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%q (U+%04X)", r, r)
	}
	return fmt.Sprintf("the text contains characters that %s cannot represent: %s", e.enc, sb.String())
}

// encode turns text back into bytes in enc, BOM included.
func encode(s string, enc encoding) ([]byte, error) {
	switch enc {
	case encUTF8:
		return []byte(s), nil
	case encUTF8BOM:
		return append(append([]byte{}, bomUTF8...), s...), nil
	case encUTF8Escaped:
		out := make([]byte, 0, len(s))
		for _, r := range s {
			if r >= escapeBase+0x80 && r <= escapeBase+0xFF {
				out = append(out, byte(r-escapeBase))
			} else {
				out = utf8.AppendRune(out, r)
			}
		}
		return out, nil
	case encUTF16LE, encUTF16BE:
		u := utf16.Encode([]rune(s))
		out := make([]byte, 2, 2+2*len(u))
		if enc == encUTF16LE {
			copy(out, bomUTF16LE)
			for _, v := range u {
				out = append(out, byte(v), byte(v>>8))
			}
		} else {
			copy(out, bomUTF16BE)
			for _, v := range u {
				out = append(out, byte(v>>8), byte(v))
			}
		}
		return out, nil
	case encWindows1252, encWindows1251:
		rev := cp1252Rev
		if enc == encWindows1251 {
			rev = cp1251Rev
		}
		out := make([]byte, 0, len(s))
		var bad []rune
		for _, r := range s {
			if r < 0x80 {
				out = append(out, byte(r))
			} else if c, ok := rev[r]; ok {
				out = append(out, c)
			} else if len(bad) < 5 && !containsRune(bad, r) {
				bad = append(bad, r)
			}
		}
		if bad != nil {
			return nil, errUnencodable{enc, bad}
		}
		return out, nil
	}
	return nil, fmt.Errorf("fileeditor: unknown encoding %d", enc)
}

func containsRune(rs []rune, r rune) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// Bytes 0x80-0xFF. Bytes a code page leaves undefined map to the C1 control
// of the same value (as Python's and WHATWG's decoders do), so every byte
// round-trips.
var cp1252 = [128]uint16{
	0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
	0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x008D, 0x017D, 0x008F,
	0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
	0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
	0x00A0, 0x00A1, 0x00A2, 0x00A3, 0x00A4, 0x00A5, 0x00A6, 0x00A7,
	0x00A8, 0x00A9, 0x00AA, 0x00AB, 0x00AC, 0x00AD, 0x00AE, 0x00AF,
	0x00B0, 0x00B1, 0x00B2, 0x00B3, 0x00B4, 0x00B5, 0x00B6, 0x00B7,
	0x00B8, 0x00B9, 0x00BA, 0x00BB, 0x00BC, 0x00BD, 0x00BE, 0x00BF,
	0x00C0, 0x00C1, 0x00C2, 0x00C3, 0x00C4, 0x00C5, 0x00C6, 0x00C7,
	0x00C8, 0x00C9, 0x00CA, 0x00CB, 0x00CC, 0x00CD, 0x00CE, 0x00CF,
	0x00D0, 0x00D1, 0x00D2, 0x00D3, 0x00D4, 0x00D5, 0x00D6, 0x00D7,
	0x00D8, 0x00D9, 0x00DA, 0x00DB, 0x00DC, 0x00DD, 0x00DE, 0x00DF,
	0x00E0, 0x00E1, 0x00E2, 0x00E3, 0x00E4, 0x00E5, 0x00E6, 0x00E7,
	0x00E8, 0x00E9, 0x00EA, 0x00EB, 0x00EC, 0x00ED, 0x00EE, 0x00EF,
	0x00F0, 0x00F1, 0x00F2, 0x00F3, 0x00F4, 0x00F5, 0x00F6, 0x00F7,
	0x00F8, 0x00F9, 0x00FA, 0x00FB, 0x00FC, 0x00FD, 0x00FE, 0x00FF,
}

var cp1251 = [128]uint16{
	0x0402, 0x0403, 0x201A, 0x0453, 0x201E, 0x2026, 0x2020, 0x2021,
	0x20AC, 0x2030, 0x0409, 0x2039, 0x040A, 0x040C, 0x040B, 0x040F,
	0x0452, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
	0x0098, 0x2122, 0x0459, 0x203A, 0x045A, 0x045C, 0x045B, 0x045F,
	0x00A0, 0x040E, 0x045E, 0x0408, 0x00A4, 0x0490, 0x00A6, 0x00A7,
	0x0401, 0x00A9, 0x0404, 0x00AB, 0x00AC, 0x00AD, 0x00AE, 0x0407,
	0x00B0, 0x00B1, 0x0406, 0x0456, 0x0491, 0x00B5, 0x00B6, 0x00B7,
	0x0451, 0x2116, 0x0454, 0x00BB, 0x0458, 0x0405, 0x0455, 0x0457,
	0x0410, 0x0411, 0x0412, 0x0413, 0x0414, 0x0415, 0x0416, 0x0417,
	0x0418, 0x0419, 0x041A, 0x041B, 0x041C, 0x041D, 0x041E, 0x041F,
	0x0420, 0x0421, 0x0422, 0x0423, 0x0424, 0x0425, 0x0426, 0x0427,
	0x0428, 0x0429, 0x042A, 0x042B, 0x042C, 0x042D, 0x042E, 0x042F,
	0x0430, 0x0431, 0x0432, 0x0433, 0x0434, 0x0435, 0x0436, 0x0437,
	0x0438, 0x0439, 0x043A, 0x043B, 0x043C, 0x043D, 0x043E, 0x043F,
	0x0440, 0x0441, 0x0442, 0x0443, 0x0444, 0x0445, 0x0446, 0x0447,
	0x0448, 0x0449, 0x044A, 0x044B, 0x044C, 0x044D, 0x044E, 0x044F,
}

var cp1252Rev, cp1251Rev = reverse(&cp1252), reverse(&cp1251)

func reverse(t *[128]uint16) map[rune]byte {
	m := make(map[rune]byte, len(t))
	for i, r := range t {
		m[rune(r)] = byte(0x80 + i)
	}
	return m
}
