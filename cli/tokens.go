package cli

import (
	"errors"
	"fmt"

	"herald/api"
	"herald/store"
)

// tokenCreatedJSON is the JSON answer of `apps token create`: the only time
// the token itself is shown.
type tokenCreatedJSON struct {
	store.APIToken
	Token string `json:"token"`
}

// runAppsToken dispatches `apps token create|list|revoke`.
func runAppsToken(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "create":
		return runTokenCreate(inv, rest)
	case "list":
		return runTokenList(inv, rest)
	case "revoke":
		return runTokenRevoke(inv, rest)
	case "":
		return usagef("apps", "apps token: missing subcommand (create, list or revoke)")
	default:
		return usagef("apps", "apps token: unknown subcommand %q (want create, list or revoke)", sub)
	}
}

// runTokenCreate creates a publishing token for an app and prints it once.
func runTokenCreate(inv *invocation, args []string) error {
	fs := inv.newFlags("apps token create")
	name := fs.String("name", "", "the token's name, unique among the app's live tokens (default: its id)")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps token create", rest, "APP"); err != nil {
		return err
	}
	if *name != "" && !api.TokenNamePattern.MatchString(*name) {
		return usagef("apps", "apps token create: --name %q must match %s", *name, api.TokenNamePattern)
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	id, token, hash, err := api.NewToken()
	if err != nil {
		return err
	}
	if *name == "" {
		*name = id
	}
	tok, err := st.CreateAPIToken(inv.ctx, id, rest[0], *name, hash, inv.actor(*actor))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("app %s is unknown or removed (starter apps list)", rest[0])
	case errors.Is(err, store.ErrTokenNameTaken):
		return invalidf("app %s already has a live token named %q: choose another --name or revoke it first", rest[0], *name)
	case err != nil:
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, tokenCreatedJSON{APIToken: tok, Token: token})
	}
	fmt.Fprintf(inv.stderr, "created token %q (id %s) for app %s; it is shown once, store it now:\n", tok.Name, tok.ID, tok.App)
	fmt.Fprintln(inv.stdout, token)
	return nil
}

// runTokenList lists the tokens of one app or of all, revoked ones included.
func runTokenList(inv *invocation, args []string) error {
	fs := inv.newFlags("apps token list")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 1 {
		return usagef("apps", "apps token list: unexpected argument %q", rest[1])
	}
	app := ""
	if len(rest) == 1 {
		app = rest[0]
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	toks, err := st.ListAPITokens(inv.ctx, app)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, nonNil(toks))
	}
	if len(toks) == 0 {
		fmt.Fprintln(inv.stdout, "no tokens (starter apps token create APP)")
		return nil
	}
	t := newTable(inv.stdout, "APP", "NAME", "ID", "CREATED", "BY", "STATUS")
	for _, k := range toks {
		app := k.App
		if k.Operator {
			app = "(operator)"
		}
		status := "live"
		if k.RevokedAt != nil {
			status = "revoked " + formatTime(*k.RevokedAt) + " by " + k.RevokedBy
		}
		t.row(app, k.Name, k.ID, formatTime(k.CreatedAt), k.CreatedBy, status)
	}
	return t.flush()
}

// runTokenRevoke revokes one token; requests with it are refused at once.
func runTokenRevoke(inv *invocation, args []string) error {
	fs := inv.newFlags("apps token revoke")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps token revoke", rest, "APP", "NAME|ID"); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	tok, err := st.RevokeAPIToken(inv.ctx, rest[0], rest[1], inv.actor(*actor))
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrTokenRevoked) {
		return invalidf("%w", err)
	}
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, tok)
	}
	fmt.Fprintf(inv.stdout, "revoked token %q (id %s) of app %s\n", tok.Name, tok.ID, tok.App)
	return nil
}
