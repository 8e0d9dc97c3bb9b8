package clientcheck_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
)

// A batch answers per item, in order: a bad item fails alone, with a path
// to its field; the batch sent again (a retry) is answered from the first,
// with the keys CreateBatch gave the items; a batch over the limit is
// refused before it is sent.
func TestCreateBatch(t *testing.T) {
	t.Parallel()
	h, c := setup(t)
	bad := email("s")
	bad.To = ""
	keyed := email("keyed")
	keyed.IdempotencyKey = "k-1"
	reqs := []client.CreateRequest{email("a"), bad, keyed}
	res, err := c.CreateBatch(t.Context(), reqs)
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, http.StatusCreated, res[0].StatusCode)
	require.NotEmpty(t, res[0].ID)
	require.Nil(t, res[0].Err)
	require.Equal(t, http.StatusBadRequest, res[1].StatusCode)
	require.Equal(t, client.CodeInvalidField, res[1].Err.Code)
	require.Equal(t, "notifications[1].to", res[1].Err.Field)
	require.Equal(t, http.StatusCreated, res[2].StatusCode)
	require.Empty(t, reqs[0].IdempotencyKey, "the caller's requests are not changed")
	n, err := c.Get(t.Context(), res[2].ID)
	require.NoError(t, err)
	require.Equal(t, "keyed", n.Subject)

	again, err := c.CreateBatch(t.Context(), []client.CreateRequest{keyed})
	require.NoError(t, err)
	require.True(t, again[0].Replayed)
	require.Equal(t, res[2].ID, again[0].ID)
	other := keyed
	other.Body = "another"
	conflict, err := c.CreateBatch(t.Context(), []client.CreateRequest{other})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, conflict[0].StatusCode)
	require.Equal(t, client.CodeIdempotencyConflict, conflict[0].Err.Code)
	require.Equal(t, 2, count(t, c))

	// The backlog's 429 is retried; the batch is written once.
	h.shed.Store(1)
	res, err = c.CreateBatch(t.Context(), []client.CreateRequest{email("x"), email("y")})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res[1].StatusCode)
	require.Equal(t, 4, count(t, c))

	_, err = c.CreateBatch(t.Context(), make([]client.CreateRequest, client.MaxBatch+1))
	require.Error(t, err)
	var apiErr *client.Error
	require.False(t, errors.As(err, &apiErr), "refused before it was sent")
}
