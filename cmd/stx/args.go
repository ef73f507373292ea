package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs moves a command's flags in front of its positional arguments.
// urfave/cli v2 stops parsing flags at the first positional argument, but
// stx's documented command line puts the file first:
//
//	stx run recipes.cue -a dpo_distributed
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	// Find the command: the first argument that names one.
	ci := -1
	var cmd *cli.Command
	for i := 1; i < len(args); i++ {
		if args[i] == "--" {
			break
		}
		if c := app.Command(args[i]); c != nil {
			ci, cmd = i, c
			break
		}
		if !strings.HasPrefix(args[i], "-") {
			return args // not a command: let cli report it
		}
	}
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, pos []string
	rest := args[ci+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue[name] && i+1 < len(rest) {
			flags = append(flags, rest[i+1])
			i++
		}
	}
	out := slices.Clone(args[:ci+1])
	out = append(out, flags...)
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}
