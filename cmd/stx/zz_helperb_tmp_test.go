package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

func TestHelperBTmpBench(t *testing.T) {
	var out, errb bytes.Buffer
	app := &cli.App{Name: "stx", Writer: &out, ErrWriter: &errb, Commands: []*cli.Command{benchCommand()}}
	st := time.Now()
	err := app.Run([]string{"stx", "bench", "--json"})
	t.Logf("err=%v elapsed %v\nstdout:\n%s\nstderr:\n%s", err, time.Since(st), out.String(), errb.String())
}
