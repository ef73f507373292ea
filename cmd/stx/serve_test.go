package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// httpCmd is the script command
//
//	http [-status N] [-json FIELD.PATH] ADDRFILE METHOD PATH BODYFILE|- OUTFILE
//
// which sends a JSON request to the server whose URL `stx serve --addr-file ADDRFILE` wrote
// (waiting up to a minute for the file: the server runs in the background), requires status N
// (default 200) and writes the response body to OUTFILE; with -json, only the value at the
// dotted path (e.g. meta_info.output_token_logprobs), as compact JSON.
func httpCmd(ts *testscript.TestScript, neg bool, args []string) {
	const usage = "usage: http [-status N] [-json FIELD.PATH] ADDRFILE METHOD PATH BODYFILE|- OUTFILE"
	if neg {
		ts.Fatalf("%s", usage)
	}
	status, field := http.StatusOK, ""
	for len(args) >= 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-status":
			n, err := strconv.Atoi(args[1])
			ts.Check(err)
			status = n
		case "-json":
			field = args[1]
		default:
			ts.Fatalf("http: unknown flag %s", args[0])
		}
		args = args[2:]
	}
	if len(args) != 5 {
		ts.Fatalf("%s", usage)
	}
	addrFile, method, path, bodyFile, outFile := ts.MkAbs(args[0]), args[1], args[2], args[3], ts.MkAbs(args[4])
	var url []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(addrFile)
		if err == nil {
			url = bytes.TrimSpace(b)
			break
		}
		if time.Now().After(deadline) {
			ts.Fatalf("http: no %s after a minute: did stx serve start?", args[0])
		}
	}
	var body io.Reader
	if bodyFile != "-" {
		b, err := os.ReadFile(ts.MkAbs(bodyFile))
		ts.Check(err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, string(url)+path, body)
	ts.Check(err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	ts.Check(err)
	if resp.StatusCode != status {
		ts.Fatalf("http %s %s: status %d, want %d: %s", method, path, resp.StatusCode, status, got)
	}
	if field != "" {
		var v any
		ts.Check(json.Unmarshal(got, &v))
		for _, k := range strings.Split(field, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				ts.Fatalf("http: the response has no %s: %s", field, got)
			}
			if v, ok = m[k]; !ok {
				ts.Fatalf("http: the response has no %s: %s", field, got)
			}
		}
		got, err = json.Marshal(v)
		ts.Check(err)
		got = append(got, '\n')
	}
	ts.Check(os.WriteFile(outFile, got, 0o644))
}
