package grep

import (
	"strings"
	"testing"
)

func BenchmarkDFAScan(b *testing.B) {
	text := []byte(strings.Repeat("\tfunc handler(ctx context.Context, req *Request) error { return nil }\n", 50000))
	for _, p := range []string{`[0-9]{4}-[0-9]{2}`, `[A-Z]{5,}`, `^\s*$`} {
		m, err := compilePattern(p, true)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p, func(b *testing.B) {
			sc := m.newScanner()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				sc.reset()
				if _, _, ok := sc.nextLine(text, 0); ok {
					b.Fatal("match")
				}
			}
		})
	}
}
