// Command computerd-sandbox runs containers for computerd: computerd starts
// it once (sandbox.Manager.Helper) and sends it every command, so that each
// container's init is this small binary rather than computerd's.
package main

import "computerd/computerd/sandbox"

func main() {
	sandbox.Init() // a re-executed container init never returns
	sandbox.HelperMain()
}
