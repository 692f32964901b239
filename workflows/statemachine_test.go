package workflows

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusIsSetOnlyByTheStateMachine checks that statemachine.go is the
// only file that sets a key's status: every setStatus call and every
// assignment to delivery.status is there, so the statuses and their
// transitions can be read in one place.
func TestStatusIsSetOnlyByTheStateMachine(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	calls := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "setStatus" {
					calls++
					if f != "statemachine.go" {
						t.Errorf("%s: setStatus called outside statemachine.go", fset.Position(n.Pos()))
					}
				}
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "status" &&
						f != "statemachine.go" && !(f == "delivery.go" && isSetup(file, n)) {
						t.Errorf("%s: the status is assigned outside statemachine.go", fset.Position(n.Pos()))
					}
				}
			}
			return true
		})
	}
	if calls == 0 {
		t.Fatal("found no setStatus call at all")
	}
}

// isSetup reports whether n is inside delivery.setup, which reads the
// status the run starts with from its search attributes.
func isSetup(file *ast.File, n ast.Node) bool {
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "setup" && fn.Pos() <= n.Pos() && n.End() <= fn.End() {
			return true
		}
	}
	return false
}

// TestKeyStatus checks the one function that works out a key's status, at
// a turn of the run loop and at rest, across the key's states.
func TestKeyStatus(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	item := func(mod func(*QueueItem)) []QueueItem {
		it := QueueItem{Event: Event{ID: "e1", Seq: 1}}
		if mod != nil {
			mod(&it)
		}
		return []QueueItem{it}
	}
	cases := []struct {
		name         string
		d            delivery
		atTurn, rest string
	}{
		{"rows not read", delivery{fromLog: true}, StatusBlocked, StatusIdle},
		{"empty", delivery{fromLog: true, loaded: true}, StatusIdle, StatusIdle},
		{"paused", delivery{Carry: Carry{KeyPaused: true, Queue: item(nil)}}, StatusPaused, StatusPaused},
		{"head untried", delivery{Carry: Carry{Queue: item(nil)}}, StatusDelivering, StatusDelivering},
		{"head retried", delivery{Carry: Carry{Queue: item(func(it *QueueItem) { it.Attempts = 2 })}}, StatusRetrying, StatusRetrying},
		{"head failed", delivery{p: Params{MaxRearms: 3}, Carry: Carry{Queue: item(func(it *QueueItem) { it.Failed = true })}}, StatusFailed, StatusFailed},
		{"head exhausted", delivery{errorPolicy: true, p: Params{MaxRearms: 3}, Carry: Carry{Rearms: 3, Queue: item(func(it *QueueItem) { it.Failed = true })}}, StatusExhausted, StatusExhausted},
		{"unreachable, waiting", delivery{Carry: Carry{WaitStatus: StatusUnreachable, WaitUntil: now.Add(time.Minute), Queue: item(nil)}}, StatusUnreachable, StatusUnreachable},
		{"unreachable, wait over", delivery{Carry: Carry{WaitStatus: StatusUnreachable, WaitUntil: now.Add(-time.Second), Queue: item(func(it *QueueItem) { it.Attempts = 1 })}}, StatusRetrying, StatusUnreachable},
		{"subscription paused", delivery{Carry: Carry{WaitStatus: StatusPaused, WaitUntil: now.Add(time.Minute), Queue: item(nil)}}, StatusPaused, StatusPaused},
	}
	for _, c := range cases {
		if got := c.d.keyStatus(now, atTurn); got != c.atTurn {
			t.Errorf("%s: at a turn %s, want %s", c.name, got, c.atTurn)
		}
		if got := c.d.keyStatus(now, atRest); got != c.rest {
			t.Errorf("%s: at rest %s, want %s", c.name, got, c.rest)
		}
	}
}
