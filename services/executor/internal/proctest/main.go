package proctest

import (
	"fmt"
	"os"

	"go.uber.org/goleak"
)

// Main is the TestMain of a package whose tests start processes: it makes
// the test binary a subreaper (BecomeSubreaper, so Gone can reap killed
// grandchildren), runs the tests, and fails the binary if goroutines are
// left behind (goleak.VerifyTestMain, with opts). It exits the process; when
// BecomeSubreaper fails it exits with status 1 before any test runs.
func Main(m goleak.TestingM, opts ...goleak.Option) {
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, opts...)
}
