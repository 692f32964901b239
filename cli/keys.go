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
	case "":
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			c, _ := lookupCommand("keys")
			printCommandUsage(inv.stdout, c)
			return nil
		}
		return usagef("keys", "keys: missing subcommand (generate)")
	default:
		return usagef("keys", "keys: unknown subcommand %q (want generate)", sub)
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
