//go:build !(((linux && amd64) || darwin) && !noxla && cgo)

package xlaplugin

import "errors"

// Plugin is a loaded PJRT plugin; this binary cannot load any (built without cgo or with
// -tags noxla).
type Plugin struct {
	Path         string
	Major, Minor int
	Wrapped      bool
}

// Load fails: this binary has no XLA support.
func Load(path string) (*Plugin, error) {
	return nil, errors.New("this binary was built without XLA support (-tags noxla or no cgo)")
}

// WrappedCalls is always 0 without XLA support.
func WrappedCalls() int64 { return 0 }
