package notify

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestForDestinationKeepsTheMarks(t *testing.T) {
	base := errors.New("503 from receiver")
	err := fmt.Errorf("webhook: %w", ForDestination(Throttled(base, 3*time.Second), "https://a.example:443"))
	key, ok := DestinationOf(err)
	if !ok || key != "https://a.example:443" {
		t.Fatalf("DestinationOf = %q, %v", key, ok)
	}
	if after, ok := IsThrottled(err); !ok || after != 3*time.Second {
		t.Fatalf("IsThrottled = %s, %v", after, ok)
	}
	if !errors.Is(err, base) {
		t.Fatal("the cause is lost")
	}
	if _, ok := DestinationOf(SenderDown(base)); ok {
		t.Fatal("an unscoped error has a destination")
	}
	if ForDestination(nil, "k") != nil {
		t.Fatal("ForDestination(nil) is not nil")
	}
}
