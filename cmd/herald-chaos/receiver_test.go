package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The receiver records signed deliveries by webhook-id, refuses unsigned
// ones, and while failing answers a dropped connection, 500 and 503 with
// Retry-After in turn.
func TestReceiver(t *testing.T) {
	r, err := startReceiver(2)
	require.NoError(t, err)
	defer r.close()
	post := func(id string, i int, sign bool) (*http.Response, error) {
		body := fmt.Sprintf(`{"chaos":"x","i":%d}`, i)
		req, err := http.NewRequest(http.MethodPost, r.urls("x")[1], strings.NewReader(body))
		require.NoError(t, err)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, r.key)
		mac.Write([]byte(id + "." + ts + "." + body))
		sig := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		if !sign {
			sig = "v1,AAAA"
		}
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", sig)
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		return c.Do(req)
	}
	resp, err := post("msg_1", 7, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, err = post("msg_1", 7, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, err = post("msg_2", 8, false)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	r.setFailing(true)
	_, err = post("msg_3", 9, true)
	require.Error(t, err, "the connection is dropped")
	resp, err = post("msg_3", 9, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	resp, err = post("msg_3", 9, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	r.setFailing(false)

	got, index := r.deliveries()
	require.Equal(t, map[string]int{"msg_1": 2}, got)
	require.Equal(t, map[string]int{"msg_1": 7}, index)
	bad, _ := r.refused()
	require.Equal(t, 1, bad)
	require.Equal(t, map[string]int{failDrop: 1, fail500: 1, fail503: 1}, r.failures())
}
