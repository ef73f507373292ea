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

// SetCluster does nothing: this binary creates no PJRT clients.
func SetCluster(c *Cluster) {}

// ClusterOptions fails without XLA support.
func ClusterOptions(path string) (map[string]any, error) {
	return nil, errors.New("this binary was built without XLA support (-tags noxla or no cgo)")
}

// LastClient reports no client: this binary creates none.
func LastClient() (Topology, bool) { return Topology{}, false }

// KeyValueCalls is always 0 without XLA support.
func KeyValueCalls() int64 { return 0 }
