package cli

import (
	"fmt"
	"path/filepath"

	"herald/signing"
)

// runKeys dispatches the keys subcommands.
func runKeys(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "generate":
		return runKeysGenerate(inv, rest)
	case "export":
		return runKeysExport(inv, rest)
	case "":
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			c, _ := lookupCommand("keys")
			printCommandUsage(inv.stdout, c)
			return nil
		}
		return usagef("keys", "keys: missing subcommand (generate, export)")
	default:
		return usagef("keys", "keys: unknown subcommand %q (want generate or export)", sub)
	}
}

// keyFiles is the output of keys generate.
type keyFiles struct {
	Kid        string `json:"kid"`
	Dir        string `json:"dir"`
	PrivateKey string `json:"privateKey"`
	PublicKey  string `json:"publicKey"`
}

// runKeysGenerate writes a new Ed25519 key pair into --out.
func runKeysGenerate(inv *invocation, args []string) error {
	fs := inv.newFlags("keys generate")
	out := fs.String("out", "", "directory to write the key pair into (created if missing)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("keys generate", rest); err != nil {
		return err
	}
	if *out == "" {
		return usagef("keys", "keys generate: --out DIR is required")
	}
	if err := inv.act(); err != nil {
		return err
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return fmt.Errorf("keys generate: %w", err)
	}
	kid, err := signing.GenerateKey(dir)
	if err != nil {
		return fmt.Errorf("keys generate: %w", err)
	}
	files := keyFiles{
		Kid:        kid,
		Dir:        dir,
		PrivateKey: filepath.Join(dir, kid+signing.PrivateKeySuffix),
		PublicKey:  filepath.Join(dir, kid+signing.PublicKeySuffix),
	}
	if inv.json {
		return writeJSON(inv.stdout, files)
	}
	fmt.Fprintf(inv.stdout, "generated signing key %s\n", files.Kid)
	fmt.Fprintf(inv.stdout, "  private key: %s\n", files.PrivateKey)
	fmt.Fprintf(inv.stdout, "  public key:  %s\n", files.PublicKey)
	fmt.Fprintf(inv.stdout, "Point the worker at the directory: HERALD_SIGNING_KEY=%s\n", files.Dir)
	fmt.Fprintln(inv.stdout, "(the newest key in it signs; keep older keys there until their tokens have expired)")
	return nil
}

// exportedKey is one public key as keys export prints it.
type exportedKey struct {
	Kid string `json:"kid"`
	// StandardWebhooks is the key in the whpk_ form Standard Webhooks
	// libraries take.
	StandardWebhooks string `json:"standardWebhooks"`
	// Signing is true for the key that signs now (the newest).
	Signing bool `json:"signing"`
}

// runKeysExport prints the public keys of the worker's key set in the form
// receivers configure: whpk_ for Standard Webhooks libraries.
func runKeysExport(inv *invocation, args []string) error {
	fs := inv.newFlags("keys export")
	sw := fs.Bool("standard-webhooks", false, "print the public keys in the whpk_ form of Standard Webhooks")
	path := fs.String("keys", "", "the worker's signing keys: a PEM file, a directory or a comma-separated list, as HERALD_SIGNING_KEY names them")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("keys export", rest); err != nil {
		return err
	}
	if !*sw {
		return usagef("keys", "keys export: say which form: --standard-webhooks (JWKS receivers fetch /.well-known/jwks.json from the worker)")
	}
	if *path == "" {
		return usagef("keys", "keys export: --keys PATH is required (the worker's HERALD_SIGNING_KEY)")
	}
	if err := inv.act(); err != nil {
		return err
	}
	ks, err := signing.LoadKeys(*path)
	if err != nil {
		return fmt.Errorf("keys export: %w", err)
	}
	pubs := ks.PublicKeys()
	signer := ks.Signer().Kid()
	var out []exportedKey
	for _, kid := range ks.Kids() {
		out = append(out, exportedKey{Kid: kid, StandardWebhooks: signing.StandardWebhooksPublicKey(pubs[kid]), Signing: kid == signer})
	}
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	for _, k := range out {
		note := ""
		if k.Signing {
			note = "  (signs now)"
		}
		fmt.Fprintf(inv.stdout, "%s  %s%s\n", k.StandardWebhooks, k.Kid, note)
	}
	fmt.Fprintln(inv.stdout, "Give a Standard Webhooks library every key listed: during a rotation deliveries are signed by the newest.")
	return nil
}
