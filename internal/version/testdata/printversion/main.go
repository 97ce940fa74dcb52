// Command printversion prints what package version reports, for
// version_test.go, which builds it with and without -ldflags.
package main

import (
	"fmt"

	"computerd/internal/version"
)

func main() { fmt.Println(version.String(), version.Revision()) }
