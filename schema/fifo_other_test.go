//go:build !unix

package schema

import "errors"

var errNoFIFO = errors.New("no FIFOs on this system")

func mkfifo(string) error { return errNoFIFO }
