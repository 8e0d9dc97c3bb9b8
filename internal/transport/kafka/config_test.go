package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		url     string
		brokers []string
		user    string
		pass    string
		parts   int32
		rf      int16
		tls     bool
		err     string
	}{
		"one broker":     {url: "kafka://k1:9092", brokers: []string{"k1:9092"}},
		"cluster":        {url: "kafka://k1:9092,k2:9092,k3:9092", brokers: []string{"k1:9092", "k2:9092", "k3:9092"}},
		"credentials":    {url: "kafka://app:p%40ss@k1:9092", brokers: []string{"k1:9092"}, user: "app", pass: "p@ss"},
		"options":        {url: "kafka://k1:9092?partitions=24&replication=3", brokers: []string{"k1:9092"}, parts: 24, rf: 3},
		"kafkas is tls":  {url: "kafkas://k1:9093", brokers: []string{"k1:9093"}, tls: true},
		"tls option":     {url: "kafka://k1:9093?tls=true", brokers: []string{"k1:9093"}, tls: true},
		"no port":        {url: "kafka://k1", err: "not host:port"},
		"no broker":      {url: "kafka://", err: "at least one broker"},
		"other scheme":   {url: "amqp://k1:5672", err: "must start with kafka://"},
		"unknown option": {url: "kafka://k1:9092?acks=1", err: `unknown broker URL option "acks"`},
		"bad partitions": {url: "kafka://k1:9092?partitions=0", err: "partitions"},
		"bad mechanism":  {url: "kafka://u:p@k1:9092?mechanism=GSSAPI", err: "unknown SASL mechanism"},
		"secret kept":    {url: "kafka://u:hunter2@k1?x=1", err: "unknown broker URL option"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := kafka.ParseURL(tc.url)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "hunter2", "an error quoted the password")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.brokers, c.Brokers)
			require.Equal(t, tc.user, c.User)
			require.Equal(t, tc.pass, c.Password)
			require.Equal(t, tc.parts, c.Partitions)
			require.Equal(t, tc.rf, c.ReplicationFactor)
			require.Equal(t, tc.tls, c.TLS != nil)
		})
	}
}

// Wrong credentials fail the readiness probe with the broker's answer, and
// the right ones pass it.
func TestCredentials(t *testing.T) {
	t.Parallel()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "herald", "right"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	good := kafka.Config{Brokers: kc.ListenAddrs(), User: "herald", Password: "right"}
	require.NoError(t, kafka.Pinger{Config: good}.Ping(ctx))

	bad := good
	bad.Password = "wrong"
	err = kafka.Pinger{Config: bad}.Ping(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "check the user, password and mechanism")
	require.NotContains(t, err.Error(), "wrong", "the error quoted the password")
}

// herald hands a worker 4 x HERALD_PREFETCH deliveries: a prefetch above the
// default MaxBuffered raises the default instead of refusing to start; an
// explicit MaxBuffered below the prefetch is still refused.
func TestMaxBufferedFollowsPrefetch(t *testing.T) {
	t.Parallel()
	_, err := kafka.NewConsumer(kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Settings: consume.Settings{Prefetch: 1200}})
	require.NoError(t, err)
	_, err = kafka.NewConsumer(kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Settings: consume.Settings{Prefetch: 1200}, MaxBuffered: 1000})
	require.ErrorContains(t, err, "max buffered (1000) must be at least the prefetch (1200)")
}
