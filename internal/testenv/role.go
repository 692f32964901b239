package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// LoginRole creates a login role named prefix and random hex, with a random
// password, for one test, and returns its name and ownerURL with its
// credentials (so it logs in to the same database, schema and options).
// The role is granted to ownerURL's role, which lets the owner drop what
// was granted to it afterwards, and gives it nothing of the owner's; it is
// dropped with what it owns when the test ends. The owner needs CREATEROLE
// (the clusters of scripts/pg.sh have it).
func LoginRole(t testing.TB, ownerURL, prefix string) (string, string) {
	t.Helper()
	u, err := url.Parse(ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	role, password := prefix+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])+"-pw"
	ident := pgx.Identifier{role}.Sanitize()
	asOwner(t, ownerURL, "CREATE ROLE "+ident+" LOGIN PASSWORD '"+password+"'")
	t.Cleanup(func() { asOwner(t, ownerURL, "DROP OWNED BY "+ident, "DROP ROLE "+ident) })
	asOwner(t, ownerURL, "GRANT "+ident+" TO current_user")
	u.User = url.UserPassword(role, password)
	return role, u.String()
}

// asOwner runs stmts in turn on a connection of their own to ownerURL,
// failing the test at the first that fails.
func asOwner(t testing.TB, ownerURL string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range stmts {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s (the test database's role needs CREATEROLE): %v", sql, err)
		}
	}
}
