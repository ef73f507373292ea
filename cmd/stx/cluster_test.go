package main

import (
	"net"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"
)

// freeportCmd is the script command `freeport VAR`: set $VAR to a TCP port that was free on the
// loopback interface a moment ago, for a coordinator (multiprocess*.txtar).
func freeportCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: freeport VAR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	port := ln.Addr().(*net.TCPAddr).Port
	ts.Check(ln.Close())
	ts.Setenv(args[0], strconv.Itoa(port))
}
