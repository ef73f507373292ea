package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"stx.dev/stx/schema"
)

// Exit codes.
const (
	exitOK      = 0
	exitInvalid = 1 // invalid recipe, failed run
	exitUsage   = 2 // bad command line
)

// report is the one place that prints errors. Recipe problems come one per
// line as file:line:col: path: message; anything else as "stx: message".
func report(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var list schema.List
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		return exitInvalid
	}
	var usage usageError
	if errors.As(err, &usage) || isCLIUsage(err) {
		fmt.Fprintf(w, "stx: %v\nRun 'stx --help' for usage.\n", err)
		return exitUsage
	}
	fmt.Fprintf(w, "stx: %v\n", err)
	return exitInvalid
}

// isCLIUsage recognises urfave/cli's own parse errors.
func isCLIUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"flag provided but not defined", "Required flag", "Required flags", "flag needs an argument", "invalid value", "No help topic for", "unknown command"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
