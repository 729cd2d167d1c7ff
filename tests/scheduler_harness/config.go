// A KubeSchedulerConfiguration file for the harness, read as kube-scheduler reads its --config:
// decoded (strict) and defaulted by the scheme's UniversalDecoder, validated by
// ValidateKubeSchedulerConfiguration, then one framework per profile (scheduler.New's
// profile.NewMap). Used three ways (tests/differential/test_config_differential.py):
//
//   - -config FILE -scheduler-name NAME: the runner's profile is NAME's (-print-profile shows it);
//   - -check-config FILE: print {"errors": [...]} (empty: accepted) and exit; -check-configs: the
//     same for a JSON list of {"config", "schedulerName"} on stdin, with each accepted one's profile;
//   - a case's optional "config" (the configuration as JSON) and "schedulerName": that case is
//     scheduled with that profile instead of the default one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// decodeConfig is kube-scheduler's options.loadConfig and Validate.
func decodeConfig(data []byte) (*schedulerapi.KubeSchedulerConfiguration, []string) {
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, []string{err.Error()}
	}
	cfg, ok := obj.(*schedulerapi.KubeSchedulerConfiguration)
	if !ok {
		return nil, []string{fmt.Sprintf("couldn't decode as KubeSchedulerConfiguration, got %s", gvk)}
	}
	if agg := validation.ValidateKubeSchedulerConfiguration(cfg); agg != nil {
		var out []string
		for _, e := range utilerrors.Flatten(agg).Errors() {
			out = append(out, e.Error())
		}
		return nil, out
	}
	return cfg, nil
}

// buildFrameworks is profile.NewMap's framework construction, profile by profile, with its
// error wrapped as scheduler.New wraps it.
func buildFrameworks(r *runner, cfg *schedulerapi.KubeSchedulerConfiguration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	defer informerFactory.Shutdown()
	snapshot := internalcache.NewEmptySnapshot()
	for i := range cfg.Profiles {
		p := cfg.Profiles[i].DeepCopy()
		f, err := frameworkruntime.NewFramework(ctx, r.registry, p,
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(informerFactory),
			frameworkruntime.WithSnapshotSharedLister(snapshot),
			frameworkruntime.WithMutableSnapshotLister(snapshot),
			frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(informerFactory.Storage().V1().CSINodes().Lister())),
			frameworkruntime.WithPodGroupManager(internalcache.New(ctx, nil, false, false)),
		)
		if err != nil {
			return fmt.Errorf("initializing profiles: %v", fmt.Errorf("creating profile for scheduler name %s: %v", p.SchedulerName, err))
		}
		_ = f.Close()
	}
	return nil
}

// profileFromConfig: the configuration's profile named name, and its global percentage.
func profileFromConfig(data []byte, name string) (*schedulerapi.KubeSchedulerProfile, *int32, error) {
	cfg, errs := decodeConfig(data)
	if errs != nil {
		return nil, nil, errors.New(fmt.Sprint(errs))
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == name {
			return &cfg.Profiles[i], cfg.PercentageOfNodesToScore, nil
		}
	}
	return nil, nil, fmt.Errorf("no profile named %q", name)
}

// checkConfig: every validation error, or the first framework's error; none when accepted.
func checkConfig(r *runner, data []byte) []string {
	cfg, errs := decodeConfig(data)
	if errs != nil {
		return errs
	}
	if err := buildFrameworks(r, cfg); err != nil {
		return []string{err.Error()}
	}
	return []string{}
}

// withCaseConfig: the runner for a case with its own configuration.
func (r *runner) withCaseConfig(tc *testCase) (*runner, error) {
	if len(tc.Config) == 0 {
		return r, nil
	}
	name := tc.SchedulerName
	if name == "" {
		name = "default-scheduler"
	}
	p, pct, err := profileFromConfig(tc.Config, name)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	rr := *r
	rr.profile, rr.percentageOfNodesToScore = p, pct
	return &rr, nil
}

type configCheck struct {
	Config        json.RawMessage `json:"config"`
	SchedulerName string          `json:"schedulerName"`
}

// checkConfigs (-check-configs): for each {"config", "schedulerName"} of the JSON list on stdin,
// {"errors": [...]} and, when the configuration is accepted and has that profile, "profile": the
// -print-profile report of it (the plugins per extension point, the weights, the args).
func checkConfigs(r *runner, in io.Reader) ([]map[string]any, error) {
	var checks []configCheck
	if err := json.NewDecoder(in).Decode(&checks); err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(checks))
	for i, c := range checks {
		errs := checkConfig(r, c.Config)
		entry := map[string]any{"errors": errs}
		if len(errs) == 0 {
			if p, pct, err := profileFromConfig(c.Config, c.SchedulerName); err == nil {
				rr := *r
				rr.profile, rr.percentageOfNodesToScore = p, pct
				report, err := profileReport(&rr)
				if err != nil {
					return nil, err
				}
				entry["profile"] = report
			}
		}
		out[i] = entry
	}
	return out, nil
}
