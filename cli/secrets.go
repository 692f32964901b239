package cli

import (
	"errors"
	"fmt"
	"time"

	"herald/signing"
	"herald/store"
)

// DefaultSecretOverlap is how long `apps secret rotate` keeps the replaced
// secret valid unless --overlap says otherwise.
const DefaultSecretOverlap = 24 * time.Hour

// secretJSON is the JSON answer of `apps secret show|rotate`.
type secretJSON struct {
	App       string           `json:"app"`
	Secret    string           `json:"secret"`
	Previous  []previousSecret `json:"previous"`
	CreatedAt time.Time        `json:"createdAt"`
}

type previousSecret struct {
	Secret     string    `json:"secret"`
	CreatedAt  time.Time `json:"createdAt"`
	ValidUntil time.Time `json:"validUntil"`
}

// runAppsSecret dispatches `apps secret show|rotate`.
func runAppsSecret(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "show":
		return runSecretShow(inv, rest)
	case "rotate":
		return runSecretRotate(inv, rest)
	case "":
		return usagef("apps", "apps secret: missing subcommand (show or rotate)")
	default:
		return usagef("apps", "apps secret: unknown subcommand %q (want show or rotate)", sub)
	}
}

// runSecretShow prints an app's current Standard Webhooks secret (creating
// its first one when it has none) and audits that it was shown.
func runSecretShow(inv *invocation, args []string) error {
	fs := inv.newFlags("apps secret show")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps secret show", rest, "APP"); err != nil {
		return err
	}
	box, err := inv.secretBox()
	if err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	who := inv.actor(*actor)
	set, err := st.EnsureAppSecrets(inv.ctx, store.SecretRequest{App: rest[0], Box: box, New: signing.NewSecret, Actor: who})
	if err != nil {
		return secretError(rest[0], err)
	}
	if err := st.AuditSecretShown(inv.ctx, rest[0], who); err != nil {
		return err
	}
	return printSecrets(inv, set)
}

// runSecretRotate makes a new secret for an app and keeps the old one valid
// for the overlap.
func runSecretRotate(inv *invocation, args []string) error {
	fs := inv.newFlags("apps secret rotate")
	overlapText := fs.String("overlap", DefaultSecretOverlap.String(), "how long the replaced secret stays valid (a Go duration, 0s to end it now)")
	reason := fs.String("reason", "", "why, recorded in the audit trail")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps secret rotate", rest, "APP"); err != nil {
		return err
	}
	overlap, err := time.ParseDuration(*overlapText)
	if err != nil || overlap < 0 {
		return invalidf("apps secret rotate: --overlap %q: want a duration of 0s or more, like 24h", *overlapText)
	}
	box, err := inv.secretBox()
	if err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	set, err := st.RotateAppSecret(inv.ctx, store.RotateRequest{
		SecretRequest: store.SecretRequest{App: rest[0], Box: box, New: signing.NewSecret, Actor: inv.actor(*actor)},
		Overlap:       overlap, Reason: *reason})
	if err != nil {
		return secretError(rest[0], err)
	}
	if !inv.json {
		fmt.Fprintf(inv.stderr, "rotated the secret of %s; the previous one stays valid for %s\n", rest[0], overlap)
	}
	return printSecrets(inv, set)
}

// secretBox reads HERALD_SECRET_KEY.
func (inv *invocation) secretBox() (*signing.SecretBox, error) {
	if err := inv.act(); err != nil {
		return nil, err
	}
	box, err := signing.LoadSecretBox(inv.getenv("HERALD_SECRET_KEY"))
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return box, nil
}

func secretError(app string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("app %s is unknown (starter apps list)", app)
	case errors.Is(err, store.ErrAppRemoved):
		return invalidf("app %s was removed: apply it again to sign its deliveries", app)
	}
	return err
}

// printSecrets writes the current secret alone on stdout (so it can be piped)
// and the still-valid previous ones on stderr, or everything as JSON.
func printSecrets(inv *invocation, set store.AppSecrets) error {
	out := secretJSON{App: set.App, Secret: set.Current.Secret, CreatedAt: set.Current.CreatedAt, Previous: []previousSecret{}}
	for _, p := range set.Previous {
		out.Previous = append(out.Previous, previousSecret{Secret: p.Secret, CreatedAt: p.CreatedAt, ValidUntil: *p.ValidUntil})
	}
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	fmt.Fprintln(inv.stdout, out.Secret)
	for _, p := range out.Previous {
		fmt.Fprintf(inv.stderr, "previous secret still valid until %s (see --json)\n", formatTime(p.ValidUntil))
	}
	return nil
}
