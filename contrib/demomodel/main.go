// Command demomodel is the scripted model `make demo` runs its agent
// against: a server on loopback that speaks OpenAI's Chat Completions
// (agentctl/model/modeltest) and answers the demo's task, fixing
// greet.sh so that test.sh passes, in four turns: run the test, edit the
// file, run the test again, report. It prints its base URL and serves
// until it is killed.
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"computerd/agentctl/model/modeltest"
)

func main() {
	args := func(v map[string]string) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	u := modeltest.Usage{Input: 400, Output: 40}
	srv := modeltest.Start(log.Printf,
		modeltest.Step{Text: "Let me run the test first.", Usage: u,
			Calls: []modeltest.Call{{Name: "exec", Args: args(map[string]string{"command": "sh test.sh"})}}},
		modeltest.Step{Text: "greet.sh prints a lower-case greeting without the exclamation mark; fixing it.", Usage: u,
			Calls: []modeltest.Call{{Name: "edit", Args: args(map[string]string{"path": "greet.sh", "old": `echo "hello, $1"`, "new": `echo "Hello, $1!"`})}}},
		modeltest.Step{Usage: u,
			Calls: []modeltest.Call{{Name: "exec", Args: args(map[string]string{"command": "sh test.sh"})}}},
		modeltest.Reply("greet.sh now prints `Hello, NAME!`, and test.sh passes.", u),
	)
	defer srv.Close()
	fmt.Println(srv.OpenAIURL())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
