package store_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"herald/internal/testenv"
	"herald/publish"
	"herald/store"
)

// nonPrintableRanges are the code points Go's unicode.IsPrint refuses,
// unassigned ones too (NUL and the surrogates left out: no text holds
// them), as ranges in ascending order.
func nonPrintableRanges() [][2]rune {
	var out [][2]rune
	for r := rune(1); r <= unicode.MaxRune; r++ {
		if (r >= 0xd800 && r <= 0xdfff) || unicode.IsPrint(r) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == r-1 {
			out[n-1][1] = r
		} else {
			out = append(out, [2]rune{r, r})
		}
	}
	return out
}

// TestSubjectClassIsGosNonPrintables: migration 0040's class of the
// characters a subject key may not hold is the one Go's tables give: a Go
// release with a newer Unicode changes it, and then a migration must
// follow.
func TestSubjectClassIsGosNonPrintables(t *testing.T) {
	esc := func(r rune) string {
		if r > 0xFFFF {
			return fmt.Sprintf(`\\U%08x`, r)
		}
		return fmt.Sprintf(`\\u%04x`, r)
	}
	var b strings.Builder
	for _, rg := range nonPrintableRanges() {
		b.WriteString(esc(rg[0]))
		if rg[1] != rg[0] {
			b.WriteString("-" + esc(rg[1]))
		}
	}
	want := "class text := E'[" + b.String() + "]';"
	sql, err := os.ReadFile("migrations/0040_publish_refuses_bad_subject_keys.sql")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sql), want) {
		t.Fatalf("migration 0040's class is not Go's (Unicode %s) non-printable assigned code points; want the line\n%s", unicode.Version, want)
	}
	for _, r := range []rune{'\t', '\n', 0x7f, 0x85, 0xa0, 0x378, 0x200b, 0x202e, 0x2028, 0xfdd0, 0xfeff, 0xfffe, 0xe000, 0xe0001, 0x10fffd} {
		if unicode.IsPrint(r) {
			t.Errorf("%U: printable to Go; the case wants one that is not", r)
		}
	}
}

// TestPublisherFunctionsRefuseBadSubjectKeys: a publisher role's
// herald_publish_fast writes nothing for a subject key that is empty,
// over 200 bytes or holds a character of migration 0040's class, and
// herald_publish refuses it (SQLSTATE 22023); both take every other key,
// as Herald's publishers do. Each range of the class is tried at both
// ends and beside them.
func TestPublisherFunctionsRefuseBadSubjectKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, roleURL := publishingSchema(ctx, t, testenv.NewSchema(t), 2)
	rs, err := store.Open(ctx, roleURL, store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	// published reports whether each function published an event of
	// subject, and the error herald_publish raised.
	published := func(subject string) (fast, slow bool, slowErr error) {
		t.Helper()
		ev := envelopedEvent("contacts", "contacts.person.updated", 1, subject, []byte(`{"n":1}`))
		err := rs.WithTx(ctx, func(tx pgx.Tx) error {
			var seq *int64
			err := tx.QueryRow(ctx, `SELECT herald_publish_fast($1::uuid, $2, $3, $4, $5, $6, $7, NULL)`,
				ev.ID, ev.Type, ev.Version, ev.Subject, store.KeyStripe(ev.Subject), ev.Envelope, ev.ContentHash).Scan(&seq)
			fast = seq != nil
			return err
		})
		if err != nil {
			t.Fatalf("herald_publish_fast(%+q): %v", subject, err)
		}
		ev = envelopedEvent("contacts", "contacts.person.updated", 1, subject, []byte(`{"n":2}`))
		slowErr = rs.WithTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT * FROM herald_publish(ARRAY[$1::uuid], ARRAY[$2], ARRAY[$3::int], ARRAY[$4],
				ARRAY[$5::int], ARRAY[$6::bytea], ARRAY[$7], ARRAY['library'], ARRAY[''], ARRAY[NULL::jsonb])`,
				ev.ID, ev.Type, ev.Version, ev.Subject, store.KeyStripe(ev.Subject), ev.Envelope, ev.ContentHash)
			return err
		})
		return fast, slowErr == nil, slowErr
	}
	// goTakes is Herald's publishers' rule (publish.MaxSubjectBytes, every
	// rune printable).
	goTakes := func(s string) bool {
		return s != "" && len(s) <= publish.MaxSubjectBytes && utf8.ValidString(s) &&
			strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
	}
	subjects := []string{"person-42", "a b", "ü-ß-é", "顧客-7", "😀", strings.Repeat("x", 200), strings.Repeat("é", 100),
		"", strings.Repeat("x", 201), strings.Repeat("é", 100) + "x", "line\nbreak", "tab\there"}
	for _, rg := range nonPrintableRanges() {
		for _, r := range []rune{rg[0] - 1, rg[0], rg[1], rg[1] + 1} {
			if r < 1 || r > unicode.MaxRune || (r >= 0xd800 && r <= 0xdfff) {
				continue
			}
			subjects = append(subjects, "k-"+string(r)+"-k")
		}
	}
	refused := 0
	for _, s := range subjects {
		fast, slow, err := published(s)
		want := goTakes(s)
		if fast != want || slow != want {
			t.Errorf("subject %+q: herald_publish_fast published %v, herald_publish %v (%v); want %v as Herald's publishers", s, fast, slow, err, want)
		}
		if !want {
			refused++
			if !strings.Contains(fmt.Sprint(err), "SQLSTATE 22023") || !strings.Contains(err.Error(), "subject key") {
				t.Errorf("subject %+q: herald_publish raised %v, want the subject key's refusal (22023)", s, err)
			}
		}
	}
	if refused < 700 {
		t.Fatalf("only %d of %d subjects refused: the cases do not try the class", refused, len(subjects))
	}
}
