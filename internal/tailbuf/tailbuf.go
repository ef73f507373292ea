// Package tailbuf keeps the end of a stream: the last bytes a child process
// wrote to its stderr, quoted in the error when it fails. stx's external
// reward commands and workflow environments both need it.
package tailbuf

import "sync"

// Buffer is an io.Writer that keeps the last Max bytes written to it. It is
// safe for concurrent use (a process's stderr is copied by its own goroutine).
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

// Write keeps the end of p and what came before it, up to Max bytes in all.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.Max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.Max:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
