package filter

import (
	"context"
	"testing"
	"time"
)

// FuzzCompile: any text either compiles or is refused with an error, never
// a panic, and a compiled filter's evaluation on an event ends within a few
// deadlines (the cost limit and Deadline bound it).
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`data.total > 1000 && subject.startsWith("eu-")`,
		`data.items.exists(x, x == 2)`,
		`[[1]].exists(a, [[a, a]].exists(b, b == b))`,
		`[[1]].exists(a, [a + a].exists(b, 1 in b))`,
		`"x" in data.tags`,
		`data.s + data.s == "x"`,
		`size(data.items) > 3 && ext.traceparent.startsWith("00-")`,
	} {
		f.Add(s)
	}
	vars, err := Variables([]byte(`{"subject":"eu-1","data":{"total":5,"items":[1,2,3],"tags":["x"],"s":"ab"},"traceparent":"00-1"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		start := time.Now()
		flt, err := Compile(text)
		if d := time.Since(start); d > time.Second*slowdown {
			t.Fatalf("compile of %q took %v", text, d)
		}
		if err != nil {
			return
		}
		start = time.Now()
		_, _ = flt.MatchVars(context.Background(), vars)
		if d := time.Since(start); d > 5*Deadline*slowdown {
			t.Fatalf("%q took %v", text, d)
		}
	})
}
