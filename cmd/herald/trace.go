package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The OTEL_* variables herald reads (the OpenTelemetry SDK specification's
// names). They are read through the process's getenv, like every HERALD_*
// variable, so that a test's in-process run sees its own.
const (
	envSDKDisabled      = "OTEL_SDK_DISABLED"
	envTracesExporter   = "OTEL_TRACES_EXPORTER"
	envEndpoint         = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint   = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol         = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol   = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envHeaders          = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders    = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envServiceName      = "OTEL_SERVICE_NAME"
	envResourceAttrs    = "OTEL_RESOURCE_ATTRIBUTES"
	envSampler          = "OTEL_TRACES_SAMPLER"
	envSamplerArg       = "OTEL_TRACES_SAMPLER_ARG"
	envBSPScheduleDelay = "OTEL_BSP_SCHEDULE_DELAY"
)

// traceShutdownTimeout bounds the flush of the spans still queued when
// the process stops.
const traceShutdownTimeout = 5 * time.Second

// newTracerProvider builds the process's one tracer provider from the
// OTEL_* variables: an OTLP/HTTP (protobuf) exporter behind a batch span
// processor. Tracing is off (a nil provider: every part then makes no
// span at all) unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT is set, and off whenever OTEL_SDK_DISABLED
// is true or OTEL_TRACES_EXPORTER is none. role names the process in the
// resource (herald.role). The returned func flushes and stops it.
func newTracerProvider(getenv func(string) string, role string) (trace.TracerProvider, func(), error) {
	off := func() {}
	if b, _ := strconv.ParseBool(getenv(envSDKDisabled)); b {
		return nil, off, nil
	}
	switch exp := strings.TrimSpace(getenv(envTracesExporter)); exp {
	case "", "otlp":
	case "none":
		return nil, off, nil
	default:
		return nil, nil, usageError{fmt.Errorf("%s=%q: herald exports traces over OTLP only (otlp or none)", envTracesExporter, exp)}
	}
	endpoint := getenv(envTracesEndpoint)
	if endpoint == "" {
		if base := getenv(envEndpoint); base != "" {
			// The generic endpoint is a base URL: each signal appends its
			// path (the specification's rule).
			endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	if endpoint == "" {
		return nil, off, nil
	}
	if _, err := url.Parse(endpoint); err != nil {
		return nil, nil, usageError{fmt.Errorf("OTLP traces endpoint: %w", err)}
	}
	proto := firstSet(getenv, envTracesProtocol, envProtocol)
	if proto != "" && proto != "http/protobuf" {
		return nil, nil, usageError{fmt.Errorf("OTLP protocol %q: herald exports over http/protobuf only", proto)}
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}
	if h := firstSet(getenv, envTracesHeaders, envHeaders); h != "" {
		headers, err := parseKeyValues(h)
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("OTLP headers: %w", err)}
		}
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	sampler, err := parseSampler(getenv(envSampler), getenv(envSamplerArg))
	if err != nil {
		return nil, nil, usageError{err}
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "herald"), attribute.String("herald.role", role)}
	if v := version; v != "" {
		attrs = append(attrs, attribute.String("service.version", v))
	}
	if ra := getenv(envResourceAttrs); ra != "" {
		kv, err := parseKeyValues(ra)
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("%s: %w", envResourceAttrs, err)}
		}
		for k, v := range kv {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	if name := getenv(envServiceName); name != "" {
		attrs = append(attrs, attribute.String("service.name", name)) // the later value of a key wins
	}
	var bsp []sdktrace.BatchSpanProcessorOption
	if d := getenv(envBSPScheduleDelay); d != "" {
		ms, err := strconv.Atoi(d)
		if err != nil || ms < 0 {
			return nil, nil, usageError{fmt.Errorf("%s=%q: want milliseconds", envBSPScheduleDelay, d)}
		}
		bsp = append(bsp, sdktrace.WithBatchTimeout(time.Duration(ms)*time.Millisecond))
	}
	// The exporter connects lazily: a collector that is down loses spans
	// (reported on stderr by the SDK), never a notification.
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, bsp...),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), traceShutdownTimeout)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}, nil
}

// firstSet returns the first of the variables that is set.
func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// parseKeyValues reads the specification's list format, key=value pairs
// separated by commas, each part percent-encoded.
func parseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", pair)
		}
		key, err := url.PathUnescape(strings.TrimSpace(k))
		if err != nil || key == "" {
			return nil, fmt.Errorf("bad key in %q", pair)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("bad value in %q", pair)
		}
		out[key] = val
	}
	return out, nil
}

// parseSampler reads OTEL_TRACES_SAMPLER and its argument; the default is
// the specification's, parentbased_always_on: a client's sampled flag is
// honoured, and every root is sampled.
func parseSampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("%s=%q: want a ratio between 0 and 1", envSamplerArg, arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("%s=%q: want always_on, always_off, traceidratio or their parentbased_ forms", envSampler, name)
}
