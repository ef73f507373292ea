//go:build !(((linux && amd64) || darwin) && !noxla && cgo)

package runtime

// xlaCompiledIn says whether the XLA (PJRT) backend is linked into this binary.
const xlaCompiledIn = false

func disableXLAAutoInstall() {}
