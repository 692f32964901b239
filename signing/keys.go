// Package signing holds Herald's Ed25519 delivery keys: generating them,
// loading them from PEM files, signing delivery JWTs (docs/design.md#the-http-contract-of-a-delivery) and publishing
// the public keys as a JWKS.
package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Suffixes of the files GenerateKey writes: <kid>.pem holds the private key,
// <kid>.pub.pem the public key.
const (
	PrivateKeySuffix = ".pem"
	PublicKeySuffix  = ".pub.pem"
)

// PEM block types read and written by this package.
const (
	pemPrivateKey = "PRIVATE KEY" // PKCS#8
	pemPublicKey  = "PUBLIC KEY"  // PKIX
)

// KeyID derives a key's id from its public key: the unpadded base64url form of
// the first 12 bytes of its SHA-256. The same key always gets the same kid,
// whatever its file is called.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// GenerateKey creates an Ed25519 key pair in dir (created with mode 0700 if
// missing): <kid>.pem holds the PKCS#8 private key (mode 0600) and
// <kid>.pub.pem the PKIX public key. It returns the kid.
func GenerateKey(dir string) (kid string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create key directory: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate ed25519 key: %w", err)
	}
	kid = KeyID(pub)

	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("encode private key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encode public key: %w", err)
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: privDER})
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: pubDER})

	if err := writeFileAtomic(dir, kid+PrivateKeySuffix, privPEM, 0o600); err != nil {
		return "", fmt.Errorf("write private key: %w", err)
	}
	if err := writeFileAtomic(dir, kid+PublicKeySuffix, pubPEM, 0o644); err != nil {
		return "", fmt.Errorf("write public key: %w", err)
	}
	return kid, nil
}

// writeFileAtomic writes data to dir/name through a temporary file, so that a
// reader never sees half a key.
func writeFileAtomic(dir, name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op once renamed

	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmpName, filepath.Join(dir, name))
}

// key is one loaded key. priv is nil for a public-only key.
type key struct {
	kid     string
	pub     ed25519.PublicKey
	priv    ed25519.PrivateKey
	path    string
	modTime time.Time
}

// newer reports whether a sorts before b: the later modification time first,
// and on equal times the lexically greater file name (then path) first.
func newer(a, b key) bool {
	if !a.modTime.Equal(b.modTime) {
		return a.modTime.After(b.modTime)
	}
	an, bn := filepath.Base(a.path), filepath.Base(b.path)
	if an != bn {
		return an > bn
	}
	return a.path > b.path
}

// KeySet is the set of keys loaded by LoadKeys, ordered newest first. The
// newest key that has a private part signs; every key is published.
type KeySet struct {
	keys   []key // newest first
	signer key
	jwks   []byte
}

// LoadKeys loads keys from spec: a PEM file, a directory, or a comma-separated
// list of files and directories (a spec that names an existing path is taken
// whole, commas and all). In a directory every *.pem file is read;
// files named *.pub.pem (and any file holding only a "PUBLIC KEY" block) are
// public-only: they are published in the JWKS but cannot sign.
//
// Private keys must be PKCS#8 ("PRIVATE KEY") Ed25519 keys, public keys PKIX
// ("PUBLIC KEY") Ed25519 keys. The kid of every key is KeyID of its public
// key; a key found twice is loaded once, its private form winning.
//
// Order: keys are sorted newest first, "newest" being the latest file
// modification time, ties broken by file name (the lexically greater name is
// the newer). The newest private key signs, so rotating keys is: add a new key
// file, restart, and remove the old file once no token signed by it can still
// be in flight. Publishing a new .pub.pem ahead of its private key lets
// receivers cache it before it signs.
//
// Key files and the folders holding them must be owned by the worker's user
// or root and not writable by group or others (checked on Unix): anyone who
// could add or change a file there could make receivers trust a key of
// theirs. A private key file must moreover be unreadable by group and others.
//
// LoadKeys fails when spec names no private key.
func LoadKeys(spec string) (*KeySet, error) {
	entries := strings.Split(spec, ",")
	if _, err := os.Stat(spec); err == nil {
		entries = []string{spec} // a path that itself contains a comma
	}
	var paths []string
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		found, err := keyFiles(entry)
		if err != nil {
			return nil, err
		}
		paths = append(paths, found...)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("load keys %q: no key files", spec)
	}

	byKid := make(map[string]int)
	var keys []key
	for _, path := range paths {
		loaded, err := loadKeyFile(path)
		if err != nil {
			return nil, err
		}
		for _, k := range loaded {
			i, seen := byKid[k.kid]
			switch {
			case !seen:
				byKid[k.kid] = len(keys)
				keys = append(keys, k)
			case keys[i].priv == nil && k.priv != nil:
				keys[i] = k
			case (keys[i].priv == nil) == (k.priv == nil) && newer(k, keys[i]):
				keys[i] = k
			}
		}
	}
	sort.SliceStable(keys, func(i, j int) bool { return newer(keys[i], keys[j]) })

	ks := &KeySet{keys: keys}
	signerFound := false
	for _, k := range keys {
		if k.priv != nil {
			ks.signer = k
			signerFound = true
			break
		}
	}
	if !signerFound {
		return nil, fmt.Errorf("load keys %q: no private key to sign with", spec)
	}
	jwks, err := buildJWKS(keys)
	if err != nil {
		return nil, err
	}
	ks.jwks = jwks
	return ks, nil
}

// keyFiles lists the key files named by one entry of a LoadKeys spec.
func keyFiles(entry string) ([]string, error) {
	info, err := os.Stat(entry)
	if err != nil {
		return nil, fmt.Errorf("load keys: %w", err)
	}
	if !info.IsDir() {
		if err := checkFolder(filepath.Dir(entry)); err != nil {
			return nil, err
		}
		return []string{entry}, nil
	}
	if err := checkFolder(entry); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(entry)
	if err != nil {
		return nil, fmt.Errorf("load keys: %w", err)
	}
	var paths []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".pem") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		paths = append(paths, filepath.Join(entry, e.Name()))
	}
	return paths, nil
}

// checkFolder refuses a key folder that someone other than the worker's
// user or root could add a key file to.
func checkFolder(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("load keys: %w", err)
	}
	return checkTrusted("folder", dir, info)
}

// loadKeyFile reads every PEM block of one file.
func loadKeyFile(path string) ([]key, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load key %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load key %s: %w", path, err)
	}
	var keys []key
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		k, err := parseBlock(block)
		if err != nil {
			return nil, fmt.Errorf("load key %s: %w", path, err)
		}
		k.path = path
		k.modTime = info.ModTime()
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("load key %s: no PEM block found", path)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("load key %s: unexpected data after the last PEM block", path)
	}
	for _, k := range keys {
		if k.priv != nil {
			if err := checkPrivateMode(path, info.Mode()); err != nil {
				return nil, err
			}
			break
		}
	}
	if err := checkTrusted("file", path, info); err != nil {
		return nil, err
	}
	// A symlinked file (a Kubernetes secret volume's) lives in another
	// folder, which must be as closed as the one it is listed in.
	if real, err := filepath.EvalSymlinks(path); err == nil && filepath.Dir(real) != filepath.Dir(path) {
		if err := checkFolder(filepath.Dir(real)); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// checkPrivateMode refuses a private key file that its group or others may
// read or write: anyone who can read it can sign deliveries every subscriber
// trusts. (Windows has no such mode bits; the check is skipped there.)
func checkPrivateMode(path string, mode os.FileMode) error {
	if runtime.GOOS == "windows" || mode.Perm()&0o077 == 0 {
		return nil
	}
	return fmt.Errorf("load key %s: private key file has mode %04o, open to its group or others: "+
		"make it readable by its owner only (chmod 600 %s; on Kubernetes, a secret volume with defaultMode 0400)",
		path, mode.Perm(), path)
}

// ErrNotEd25519 reports a key (or PEM block) of another kind than Ed25519.
var ErrNotEd25519 = errors.New("not an Ed25519 key")

// parseBlock decodes one PEM block into a key.
func parseBlock(block *pem.Block) (key, error) {
	switch block.Type {
	case pemPrivateKey:
		parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return key{}, fmt.Errorf("parse PKCS#8 private key: %w", err)
		}
		priv, ok := parsed.(ed25519.PrivateKey)
		if !ok {
			return key{}, fmt.Errorf("%w (found %T)", ErrNotEd25519, parsed)
		}
		pub, ok := priv.Public().(ed25519.PublicKey)
		if !ok {
			return key{}, ErrNotEd25519
		}
		return key{kid: KeyID(pub), pub: pub, priv: priv}, nil
	case pemPublicKey:
		parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return key{}, fmt.Errorf("parse PKIX public key: %w", err)
		}
		pub, ok := parsed.(ed25519.PublicKey)
		if !ok {
			return key{}, fmt.Errorf("%w (found %T)", ErrNotEd25519, parsed)
		}
		return key{kid: KeyID(pub), pub: pub}, nil
	default:
		return key{}, fmt.Errorf("%w: PEM block %q (want PKCS#8 %q or PKIX %q)",
			ErrNotEd25519, block.Type, pemPrivateKey, pemPublicKey)
	}
}

// Signer returns a signer for the newest private key. Each call returns a new
// Signer, so a caller may set its Now field without affecting others.
func (ks *KeySet) Signer() *Signer {
	return NewSigner(ks.signer.priv)
}

// Kids returns the ids of all keys, newest first.
func (ks *KeySet) Kids() []string {
	kids := make([]string, len(ks.keys))
	for i, k := range ks.keys {
		kids[i] = k.kid
	}
	return kids
}

// PublicKeys returns every published key by kid.
func (ks *KeySet) PublicKeys() map[string]ed25519.PublicKey {
	out := make(map[string]ed25519.PublicKey, len(ks.keys))
	for _, k := range ks.keys {
		out[k.kid] = k.pub
	}
	return out
}
