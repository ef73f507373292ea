//go:build !(((linux && amd64) || darwin) && !noxla && cgo)

package runtime

import (
	"errors"

	"github.com/gomlx/gomlx/backends"

	"stx.dev/stx/runtime/xlaplugin"
)

// xlaCompiledIn says whether the XLA (PJRT) backend is linked into this binary.
const xlaCompiledIn = false

func disableXLAAutoInstall() {}

func newXLA(string) (backends.Backend, *xlaplugin.Plugin, error) {
	return nil, nil, errors.New("this binary was built without XLA support (-tags noxla or no cgo)")
}
