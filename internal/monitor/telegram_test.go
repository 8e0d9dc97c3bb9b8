package monitor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

const testToken = "123456:SECRET-token"

func TestTelegramSend(t *testing.T) {
	t.Parallel()
	bot := newBotServer(t, http.StatusOK)
	tg := newTelegram(TelegramConfig{Token: testToken, ChatID: "-10042", API: bot.URL + "/"}.withDefaults())

	require.NoError(t, tg.send(context.Background(), "alert firing alert=OutboxBacklog"))

	reqs := bot.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, http.MethodPost, reqs[0].Method)
	require.Equal(t, "/bot"+testToken+"/sendMessage", reqs[0].Path)
	require.Equal(t, "application/json", reqs[0].ContentType)
	require.Equal(t, "-10042", reqs[0].ChatID)
	require.Equal(t, "alert firing alert=OutboxBacklog", reqs[0].Text)
}

func TestTelegramErrorsHideToken(t *testing.T) {
	t.Parallel()
	rejecting := newBotServer(t, http.StatusUnauthorized)
	// A server that is gone: the client's error would name the URL, and
	// with it the token, if send did not rewrite it.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	for name, api := range map[string]string{"rejected": rejecting.URL, "unreachable": gone.URL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := newTelegram(TelegramConfig{Token: testToken, ChatID: "1", API: api}.withDefaults())
			err := tg.send(context.Background(), "x")
			require.Error(t, err)
			require.NotContains(t, err.Error(), "SECRET")
			if name == "rejected" {
				require.Contains(t, err.Error(), "status 401: Unauthorized")
			}
		})
	}
}
