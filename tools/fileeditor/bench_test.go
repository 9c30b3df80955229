package fileeditor

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkView views a 500-line source file, the common case of a call.
func BenchmarkView(b *testing.B) {
	var sb strings.Builder
	for i := range 500 {
		fmt.Fprintf(&sb, "\tif err := doSomething(ctx, %d); err != nil { return fmt.Errorf(\"step %d: %%w\", err) }\n", i, i)
	}
	p := writeTemp(b, "f.go", []byte(sb.String()))
	e := newExec(b)
	ctx := context.Background()
	a := Action{Command: "view", Path: p}
	b.ReportAllocs()
	for b.Loop() {
		obs, err := e.Call(ctx, a)
		if err != nil || obs.IsError {
			b.Fatal(err, obs.Text())
		}
	}
}

// BenchmarkStrReplace edits the same file (read, match, atomic write with fsync).
func BenchmarkStrReplace(b *testing.B) {
	var sb strings.Builder
	for i := range 500 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	p := writeTemp(b, "f.txt", []byte(sb.String()))
	e := newExec(b)
	ctx := context.Background()
	oldText, newText := "line 250\n", "LINE 250\n"
	b.ReportAllocs()
	for b.Loop() {
		obs, err := e.Call(ctx, Action{Command: "str_replace", Path: p, OldStr: &oldText, NewStr: &newText})
		if err != nil || obs.IsError {
			b.Fatal(err, obs.Text())
		}
		oldText, newText = newText, oldText
	}
}
