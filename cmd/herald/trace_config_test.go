package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// The OTEL_* variables: tracing is off without an endpoint, and off when
// disabled; a protocol or exporter herald does not speak, or a malformed
// value, is a usage error at start, not a silent loss of spans.
func TestTracerProviderFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		env   map[string]string
		on    bool
		usage bool
	}{
		{name: "nothing set", env: nil},
		{name: "generic endpoint", env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "disabled", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSDKDisabled: "true"}},
		{name: "exporter none", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesExporter: "none"}},
		{name: "exporter zipkin", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesExporter: "zipkin"}, usage: true},
		{name: "grpc", env: map[string]string{envEndpoint: "http://127.0.0.1:4317", envProtocol: "grpc"}, usage: true},
		{name: "http/protobuf", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envTracesProtocol: "http/protobuf"}, on: true},
		{name: "bad sampler", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSampler: "sometimes"}, usage: true},
		{name: "bad ratio", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSampler: "traceidratio", envSamplerArg: "2"}, usage: true},
		{name: "ratio", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envSampler: "parentbased_traceidratio", envSamplerArg: "0.25"}, on: true},
		{name: "headers", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envHeaders: "authorization=Bearer%20x,x-team=a"}, on: true},
		{name: "bad headers", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envHeaders: "novalue"}, usage: true},
		{name: "bad delay", env: map[string]string{envEndpoint: "http://127.0.0.1:4318", envBSPScheduleDelay: "5s"}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp, stop, err := newTracerProvider(func(k string) string { return tc.env[k] }, "api")
			if tc.usage {
				var ue usageError
				require.True(t, errors.As(err, &ue), "want a usage error, got %v", err)
				return
			}
			require.NoError(t, err)
			defer stop()
			require.Equal(t, tc.on, tp != nil)
		})
	}
}

func TestParseKeyValues(t *testing.T) {
	t.Parallel()
	kv, err := parseKeyValues("service.namespace=prod, deployment.environment=eu%2Dwest ,")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"service.namespace": "prod", "deployment.environment": "eu-west"}, kv)
	_, err = parseKeyValues("=x")
	require.Error(t, err)
}
