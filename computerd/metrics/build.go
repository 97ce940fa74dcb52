package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"computerd/internal/version"
)

// buildInfo is computerd_build_info: always 1, its labels saying which
// build runs (what computerd --version prints, the commit, the Go release).
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "computerd_build_info", Help: "The build of computerd that runs: version (computerd --version), revision (the commit, when known) and goversion; always 1.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(version.String(), version.Revision(), version.Go()).Set(1)
	return g
}
