package conformance_test

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// profiles are the conformance profiles run, in report order; adding one
// is one line. The features tested are those GatewayClass istio reports
// (gateway.SupportedFeatures) that belong to a profile run: claiming a
// feature there adds its tests here, with no change to the harness.
// GATEWAY-TCP is not run: every TCPRoute test dials the Gateway, and
// nothing here carries traffic.
var profiles = []suite.ConformanceProfile{
	suite.GatewayHTTPConformanceProfile,
	suite.GatewayGRPCConformanceProfile,
	suite.GatewayTLSConformanceProfile,
}

var profileFlag = flag.String("profiles", "", "comma-separated conformance profiles to run (default: all of profiles, e.g. GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS)")

// runProfiles are the profiles -profiles selects, all when it is empty.
func runProfiles() ([]suite.ConformanceProfile, error) {
	if *profileFlag == "" {
		return profiles, nil
	}
	var out []suite.ConformanceProfile
	for _, name := range strings.Split(*profileFlag, ",") {
		i := slices.IndexFunc(profiles, func(p suite.ConformanceProfile) bool { return string(p.Name) == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("-profiles: %q is not one of the profiles run here", name)
		}
		out = append(out, profiles[i])
	}
	return out, nil
}

func profileNames(ps []suite.ConformanceProfile) []suite.ConformanceProfileName {
	out := make([]suite.ConformanceProfileName, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// profileFeatures are the features of ps's profiles, core and extended.
func profileFeatures(ps []suite.ConformanceProfile) sets.Set[features.FeatureName] {
	all := sets.New[features.FeatureName]()
	for _, p := range ps {
		all = all.Union(p.CoreFeatures).Union(p.ExtendedFeatures)
	}
	return all
}

// runFeatures are the features GatewayClass istio reports that belong to
// ps's profiles: those the suite tests.
func runFeatures(ps []suite.ConformanceProfile) []features.FeatureName {
	in := profileFeatures(ps)
	var out []features.FeatureName
	for _, f := range gateway.SupportedFeatures() {
		if in.Has(features.FeatureName(f)) {
			out = append(out, features.FeatureName(f))
		}
	}
	return out
}

// inProfile says whether test belongs to profile p, as the suite's report
// decides it: every feature of the test is one of p's.
func inProfile(test suite.ConformanceTest, p suite.ConformanceProfile) bool {
	for _, f := range test.Features {
		if !p.CoreFeatures.Has(f) && !p.ExtendedFeatures.Has(f) {
			return false
		}
	}
	return true
}
