//go:build !unix

package hub

import "os"

// lockFile does nothing where flock(2) is missing: a blob is still written to
// its .incomplete file and renamed into place once checked.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) {}
