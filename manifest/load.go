package manifest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// manifestExts are the file name extensions Load picks up in a directory.
var manifestExts = []string{".json", ".yaml", ".yml"}

// ParseFile reads and parses the manifest in the file at path. Files larger
// than MaxManifestBytes are refused without being read in full.
func ParseFile(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return Parse(path, data)
}

// Load parses the manifests at paths. Each path is a manifest file or a
// directory, of which every *.json, *.yaml and *.yml file directly inside is
// read, in name order. Load reads everything before judging: the error lists
// the problems of every file (joined with errors.Join, each manifest's as a
// *ValidationError), as well as any app declared by more than one manifest.
func Load(paths ...string) ([]*Manifest, error) {
	if len(paths) == 0 {
		return nil, errors.New("load manifests: no paths given")
	}
	var (
		manifests []*Manifest
		errs      []error
		firstFile = make(map[string]string) // app id → source declaring it first
	)
	for _, path := range paths {
		files, err := manifestFiles(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, file := range files {
			m, err := ParseFile(file)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if first, dup := firstFile[m.App]; dup {
				errs = append(errs, &ValidationError{
					Source: m.Source,
					App:    m.App,
					Problems: []Problem{{
						Field:   "app",
						Message: fmt.Sprintf("app %q is already declared by %s; an app has exactly one manifest", m.App, first),
					}},
				})
				continue
			}
			firstFile[m.App] = m.Source
			manifests = append(manifests, m)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return manifests, nil
}

// manifestFiles expands path into the manifest files it stands for.
func manifestFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load manifests: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("load manifests: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !slices.Contains(manifestExts, strings.ToLower(filepath.Ext(e.Name()))) {
			continue
		}
		file := filepath.Join(path, e.Name())
		// Stat, not the entry's type, so that symbolic links to files count.
		if fi, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("load manifests: %w", err)
		} else if fi.IsDir() {
			continue
		}
		files = append(files, file)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("load manifests: no manifest files (*.json, *.yaml, *.yml) in %s", path)
	}
	return files, nil // os.ReadDir sorts by name
}
