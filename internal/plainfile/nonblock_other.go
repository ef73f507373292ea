//go:build !unix

package plainfile

// nonBlock is not needed where FIFOs cannot block an open.
const nonBlock = 0
