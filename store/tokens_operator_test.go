package store_test

import (
	"context"
	"errors"
	"testing"

	"herald/store"
)

// TestOperatorTokens: an operator token is made and revoked by name, has no
// app, is found live with Operator set until revoked, and its name is
// unique among live operator tokens only.
func TestOperatorTokens(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	tok, err := s.CreateOperatorToken(ctx, "00000000000000aa", "oncall", []byte("hash"), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Operator || tok.App != "" || tok.Name != "oncall" {
		t.Errorf("created %+v", tok)
	}
	if _, err := s.CreateOperatorToken(ctx, "00000000000000ab", "oncall", []byte("hash"), "alice"); !errors.Is(err, store.ErrTokenNameTaken) {
		t.Errorf("a second live oncall: %v", err)
	}
	cred, err := s.LiveAPIToken(ctx, "00000000000000aa")
	if err != nil || !cred.Operator || cred.App != "" || cred.AppRemoved {
		t.Errorf("live operator token: %+v, %v", cred, err)
	}
	toks, err := s.ListAPITokens(ctx, "")
	if err != nil || len(toks) != 1 || !toks[0].Operator {
		t.Errorf("list: %+v, %v", toks, err)
	}
	if _, err := s.RevokeOperatorToken(ctx, "oncall", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LiveAPIToken(ctx, "00000000000000aa"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoked operator token: %v", err)
	}
	if _, err := s.RevokeOperatorToken(ctx, "00000000000000aa", "bob"); !errors.Is(err, store.ErrTokenRevoked) {
		t.Errorf("revoked again: %v", err)
	}
	if _, err := s.CreateOperatorToken(ctx, "00000000000000ac", "oncall", []byte("hash"), "alice"); err != nil {
		t.Errorf("the name of a revoked token: %v", err)
	}
	if rows := auditRows(t, s, store.ActionAPITokenRevoked, "00000000000000aa"); len(rows) != 1 || rows[0].Actor != "bob" {
		t.Errorf("revocation audit: %+v", rows)
	}
}
