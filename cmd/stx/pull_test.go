package main

import (
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"

	"stx.dev/stx/hub/hubtest"
)

// The fake hubs of the running scripts, one per script.
var (
	hubsMu sync.Mutex
	hubs   = map[*testscript.TestScript]*hubtest.Server{}
)

// hubserveCmd is the script command
//
//	hubserve [-token T] [-branch B] model|dataset ID DIR
//
// which serves the files under DIR as a commit of repository ID (on branch B, default
// main) of a fake Hugging Face Hub on loopback (package hubtest: the Hub's API, LFS files
// through a second server standing for the CDN), and points $HF_ENDPOINT at it. The
// first call starts the script's hub; the script's end stops it. -token makes the
// repository gated: only requests with that token get it. $HUB_SHA is the commit's sha.
func hubserveCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: hubserve [-token T] [-branch B] model|dataset ID DIR")
	}
	token, branch := "", "main"
	for len(args) >= 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-token":
			token = args[1]
		case "-branch":
			branch = args[1]
		default:
			ts.Fatalf("hubserve: unknown flag %s", args[0])
		}
		args = args[2:]
	}
	if len(args) != 3 || (args[0] != "model" && args[0] != "dataset") {
		ts.Fatalf("usage: hubserve [-token T] [-branch B] model|dataset ID DIR")
	}
	files, err := hubtest.DirFiles(ts.MkAbs(args[2]))
	ts.Check(err)
	hubsMu.Lock()
	s := hubs[ts]
	if s == nil {
		s = hubtest.New()
		hubs[ts] = s
		ts.Defer(func() {
			s.Close()
			hubsMu.Lock()
			delete(hubs, ts)
			hubsMu.Unlock()
		})
	}
	hubsMu.Unlock()
	sha := s.Commit(args[0], args[1], branch, files)
	if token != "" {
		s.RequireToken(args[0], args[1], token)
	}
	ts.Setenv("HF_ENDPOINT", s.URL())
	ts.Setenv("HUB_SHA", sha)
}
