package sqlrows_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

// rows is a result held in memory: Scan copies the current row's values
// into dest, which must point to values of their types.
type rows struct {
	vals [][]any
	at   int
	err  error
}

func (r *rows) Next() bool { r.at++; return r.at <= len(r.vals) }
func (r *rows) Err() error { return r.err }
func (r *rows) Scan(dest ...any) error {
	for i, d := range dest {
		reflect.ValueOf(d).Elem().Set(reflect.ValueOf(r.vals[r.at-1][i]))
	}
	return nil
}

func TestPreferences(t *testing.T) {
	t.Parallel()
	p, err := sqlrows.Preferences(&rows{vals: [][]any{{"news", "email", false}, {"news", "sms", true}, {"billing", "email", true}}})
	require.NoError(t, err)
	require.Equal(t, notify.Preferences{"news": {"email": false, "sms": true}, "billing": {"email": true}}, p)

	p, err = sqlrows.Preferences(&rows{})
	require.NoError(t, err)
	require.Equal(t, notify.Preferences{}, p, "none is an empty set")

	boom := errors.New("boom")
	_, err = sqlrows.Preferences(&rows{err: boom})
	require.ErrorIs(t, err, boom)
}

func TestAttemptStatementsFor(t *testing.T) {
	t.Parallel()
	st := sqlrows.AttemptStatements{Oldest: "oldest", Newest: "newest"}
	q, args, err := st.For(7, notify.AttemptFilter{Limit: 10, After: 3})
	require.NoError(t, err)
	require.Equal(t, "oldest", q)
	require.Equal(t, []any{int64(7), int64(3), int64(11)}, args, "one row past the page")

	q, _, err = st.For(7, notify.AttemptFilter{Limit: 1, Newest: true})
	require.NoError(t, err)
	require.Equal(t, "newest", q)

	_, _, err = st.For(7, notify.AttemptFilter{})
	require.EqualError(t, err, "limit must be at least 1, got 0")
}

func TestAttemptPage(t *testing.T) {
	t.Parallel()
	// Each row holds an attempt id, 0 for the row without an attempt.
	page := func(r *rows, limit int) (notify.AttemptPage, error) {
		return sqlrows.AttemptPage(r, limit, func() (notify.Attempt, bool, error) {
			var id int64
			if err := r.Scan(&id); err != nil {
				return notify.Attempt{}, false, err
			}
			return notify.Attempt{ID: id}, id != 0, nil
		})
	}
	_, err := page(&rows{}, 10)
	require.ErrorIs(t, err, notify.ErrNotFound, "no row: no notification")

	p, err := page(&rows{vals: [][]any{{int64(0)}}}, 10)
	require.NoError(t, err)
	require.Empty(t, p.Items, "the row without an attempt: an empty page")

	p, err = page(&rows{vals: [][]any{{int64(1)}, {int64(2)}, {int64(3)}}}, 2)
	require.NoError(t, err)
	require.Equal(t, notify.AttemptPage{Items: []notify.Attempt{{ID: 1}, {ID: 2}}, Next: 2}, p, "the row past the limit says there is more")
}

func TestTemplates(t *testing.T) {
	t.Parallel()
	r := &rows{vals: [][]any{{"a", "email", 2}, {"a", "sms", 2}, {"b", "email", 1}}}
	ts, err := sqlrows.Templates(r, func() (notify.TemplateVersion, int, error) {
		var (
			v      notify.TemplateVersion
			latest int
		)
		err := r.Scan(&v.Name, &v.Channel, &latest)
		return v, latest, err
	})
	require.NoError(t, err)
	require.Equal(t, []notify.Template{
		{Name: "a", Latest: 2, Variants: []notify.TemplateVersion{{Name: "a", Channel: "email"}, {Name: "a", Channel: "sms"}}},
		{Name: "b", Latest: 1, Variants: []notify.TemplateVersion{{Name: "b", Channel: "email"}}},
	}, ts)
}
