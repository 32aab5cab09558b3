// Many goroutines on Go's runtime, which runs them on threads of its own
// (one per GOMAXPROCS, default the CPU count, plus the garbage collector's
// workers and sysmon): ROUNDS rounds, each forking GOROUTINES goroutines
// that fill a fresh buffer and hash it, joined before the next round starts.
// The fresh buffers keep the collector at work, as a real server's would.
//
//	goroutines ROUNDS GOROUTINES
//
// Prints a digest of every round's hashes, so that the work is kept.
// Standard library only, and nothing newer than Go 1.19 (Debian 12's).
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// bufferBytes and hashes size one goroutine's work: about a millisecond.
const (
	bufferBytes = 64 << 10
	hashes      = 8
)

func work(seed int) [sha256.Size]byte {
	buf := make([]byte, bufferBytes)
	for i := range buf {
		buf[i] = byte(seed*31 + i)
	}
	sum := sha256.Sum256(buf)
	for i := 1; i < hashes; i++ {
		copy(buf, sum[:])
		sum = sha256.Sum256(buf)
	}
	return sum
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: goroutines ROUNDS GOROUTINES")
		os.Exit(2)
	}
	rounds, err1 := strconv.Atoi(os.Args[1])
	count, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil || rounds <= 0 || count <= 0 {
		fmt.Fprintln(os.Stderr, "usage: goroutines ROUNDS GOROUTINES")
		os.Exit(2)
	}
	digest := sha256.New()
	sums := make([][sha256.Size]byte, count)
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		wg.Add(count)
		for g := 0; g < count; g++ {
			go func(g int) {
				defer wg.Done()
				sums[g] = work(r*count + g)
			}(g)
		}
		wg.Wait()
		for _, s := range sums {
			digest.Write(s[:])
		}
	}
	fmt.Printf("%x\n", digest.Sum(nil))
}
