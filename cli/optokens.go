package cli

import (
	"errors"
	"fmt"

	"herald/api"
	"herald/store"
)

// runTokens dispatches `tokens create|list|revoke`: operator tokens of the
// operations API (app tokens are `apps token`).
func runTokens(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "create":
		return runOperatorTokenCreate(inv, rest)
	case "list":
		return runTokenList(inv, rest)
	case "revoke":
		return runOperatorTokenRevoke(inv, rest)
	case "":
		return usagef("tokens", "tokens: missing subcommand (create, list or revoke)")
	default:
		return usagef("tokens", "tokens: unknown subcommand %q (want create, list or revoke)", sub)
	}
}

// runOperatorTokenCreate creates an operator token and prints it once.
func runOperatorTokenCreate(inv *invocation, args []string) error {
	fs := inv.newFlags("tokens create")
	operator := fs.Bool("operator", false, "an operator token: it sees and acts on every app in the operations API (required; app tokens: starter apps token create APP)")
	name := fs.String("name", "", "the token's name, unique among the live operator tokens; the audit trail names its actions by it (required)")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("tokens create", rest); err != nil {
		return err
	}
	if !*operator {
		return usagef("tokens", "tokens create: give --operator (an app's token: starter apps token create APP)")
	}
	if !api.TokenNamePattern.MatchString(*name) {
		return usagef("tokens", "tokens create: --name %q must match %s", *name, api.TokenNamePattern)
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
	tok, err := st.CreateOperatorToken(inv.ctx, id, *name, hash, inv.actor(*actor))
	if errors.Is(err, store.ErrTokenNameTaken) {
		return invalidf("a live operator token is named %q: choose another --name or revoke it first", *name)
	}
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, tokenCreatedJSON{APIToken: tok, Token: token})
	}
	fmt.Fprintf(inv.stderr, "created operator token %q (id %s); it sees and acts on every app; it is shown once, store it now:\n", tok.Name, tok.ID)
	fmt.Fprintln(inv.stdout, token)
	return nil
}

// runOperatorTokenRevoke revokes one operator token.
func runOperatorTokenRevoke(inv *invocation, args []string) error {
	fs := inv.newFlags("tokens revoke")
	operator := fs.Bool("operator", false, "revoke an operator token (required; app tokens: starter apps token revoke APP NAME)")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("tokens revoke", rest, "NAME|ID"); err != nil {
		return err
	}
	if !*operator {
		return usagef("tokens", "tokens revoke: give --operator (an app's token: starter apps token revoke APP NAME)")
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	tok, err := st.RevokeOperatorToken(inv.ctx, rest[0], inv.actor(*actor))
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrTokenRevoked) {
		return invalidf("%w", err)
	}
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, tok)
	}
	fmt.Fprintf(inv.stdout, "revoked operator token %q (id %s)\n", tok.Name, tok.ID)
	return nil
}
