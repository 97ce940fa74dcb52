package command

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"computerd/client"
	"computerd/core"
	"computerd/internal/version"
	"computerd/wire"
)

func statusCommand() *cli.Command {
	return cmd("status", "show the computerd agentctl talks to (address, version), and the token's tenant and scopes", "", 0, 0, status)
}

// statusReport is what agentctl status shows.
type statusReport struct {
	Server     string            `json:"server"`                // the URL agentctl calls
	ServerFrom string            `json:"server_from"`           // where that URL came from
	Agentctl   string            `json:"agentctl"`              // agentctl's version
	Computerd  *wire.VersionInfo `json:"computerd"`             // its answer (GET /v1/version)
	TokenFrom  string            `json:"token_from"`            // where the token came from ("" when none)
	TokenError string            `json:"token_error,omitempty"` // why the token does not work
}

// status asks computerd for its version with the token, which also says
// who the token is; with a token refused, it asks again without, so the
// answer still names the daemon. A daemon that does not answer, or a
// token that is missing or refused, ends with an error (status 1) after
// the report.
func status(c *cli.Context) error {
	cl := clientOf(c)
	rep := statusReport{Server: cl.BaseURL, ServerFrom: "the default", Agentctl: version.String()}
	if from := serverFrom(stateOf(c).args); from != "" {
		rep.ServerFrom = "from " + from
	}
	switch {
	case c.String("token-file") != "":
		rep.TokenFrom = "the file " + c.String("token-file")
	case cl.Token != "":
		rep.TokenFrom = wire.TokenEnv
	}
	info, err := cl.Version(c.Context)
	var ue *client.UnreachableError
	switch {
	case errors.As(err, &ue):
		return err
	case errors.Is(err, core.ErrBadToken):
		rep.TokenError = err.Error()
		anon := *cl
		anon.Token = ""
		if info, err = anon.Version(c.Context); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	rep.Computerd = &info
	if rep.TokenFrom == "" {
		rep.TokenError = "no token: set " + wire.TokenEnv + " or --token-file FILE (computerd token create TENANT, on the computerd host, prints one)"
	}
	if err := output(c, rep, func(w io.Writer) { writeStatus(w, rep) }); err != nil {
		return err
	}
	if rep.TokenError != "" {
		return &ExitError{Code: 1} // the report said why
	}
	return nil
}

// writeStatus prints the report for people.
func writeStatus(w io.Writer, rep statusReport) {
	v := rep.Computerd
	fmt.Fprintf(w, "server:    %s (%s)\n", rep.Server, rep.ServerFrom)
	build := v.Version
	if rev := v.Revision; rev != "" && !strings.HasPrefix(rev, v.Version) {
		build += ", commit " + rev[:min(len(rev), 12)]
	}
	fmt.Fprintf(w, "computerd: %s (%s, API %s)\n", build, v.Go, v.API)
	fmt.Fprintf(w, "agentctl:  %s\n", rep.Agentctl)
	if rep.TokenError != "" {
		if rep.TokenFrom != "" {
			fmt.Fprintf(w, "token:     from %s\n", rep.TokenFrom)
		}
		fmt.Fprintf(w, "token:     %s\n", rep.TokenError)
		return
	}
	scopes := strings.Join(v.Scopes, ", ")
	if scopes == "" {
		scopes = "none (its tenant's workspaces only)"
	}
	id := v.TokenID
	if id == "" {
		id = "(checked by the home)"
	}
	fmt.Fprintf(w, "tenant:    %s\n", v.Tenant)
	fmt.Fprintf(w, "token:     %s from %s; scopes: %s\n", id, rep.TokenFrom, scopes)
}
