//go:build ((linux && amd64) || darwin) && !noxla && cgo

package runtime

import (
	"os"

	"github.com/gomlx/gomlx/backends/xla"
)

// xlaCompiledIn says whether the XLA (PJRT) backend is linked into this binary.
const xlaCompiledIn = true

// disableXLAAutoInstall stops go-xla from downloading PJRT plugins from the network: stx
// only uses plugins the user configured.
func disableXLAAutoInstall() {
	_ = os.Setenv(xla.NoAutoInstallEnv, "1")
	xla.EnableAutoInstall(false)
}
