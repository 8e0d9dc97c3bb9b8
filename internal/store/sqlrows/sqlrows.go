// Package sqlrows turns the rows of a query into domain values where
// PostgreSQL and SQLite read the same columns by the same rule, and gives
// such a query its arguments where they follow the same rule, so that the
// rule lives once. Each engine keeps its own SQL, its own column types and
// its own error wrapping: the functions here return an error as it is, for
// the caller to wrap.
//
// It lives beside the store engines, which share it.
package sqlrows

import (
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

// Rows is the part of a query's result that both engines' drivers offer
// (pgx.Rows, *sql.Rows). The caller closes it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Preferences reads rows of (category, channel, allowed) into a set of
// preferences; no row is an empty set.
func Preferences(rows Rows) (notify.Preferences, error) {
	p := notify.Preferences{}
	for rows.Next() {
		var (
			cat, ch string
			allowed bool
		)
		if err := rows.Scan(&cat, &ch, &allowed); err != nil {
			return nil, err
		}
		if p[cat] == nil {
			p[cat] = map[string]bool{}
		}
		p[cat][ch] = allowed
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// AttemptStatements are an engine's two statements for a page of a
// notification's attempts, Oldest in attempt order and Newest newest
// first. Each takes the arguments (the notification's id, the filter's
// After, the rows to read) and answers as AttemptPage reads.
type AttemptStatements struct {
	Oldest, Newest string
}

// For returns the statement and arguments that read the page f selects of
// notification id's attempts, one row past the page (see AttemptPage), or
// an error when f's limit is below 1.
func (s AttemptStatements) For(id int64, f notify.AttemptFilter) (string, []any, error) {
	if f.Limit < 1 {
		return "", nil, fmt.Errorf("limit must be at least 1, got %d", f.Limit)
	}
	q := s.Oldest
	if f.Newest {
		q = s.Newest
	}
	return q, []any{id, f.After, int64(f.Limit) + 1}, nil
}

// AttemptPage reads the rows of a query for a page of a notification's
// attempts, which answers one row per attempt, one row without an attempt
// (its columns NULL) when the page is empty, and no row at all when the
// notification does not exist: then AttemptPage returns notify.ErrNotFound.
// The query reads one row past limit, the page's, to learn whether there is
// a next page.
//
// scan reads the current row; ok is false for the row without an attempt.
func AttemptPage(rows Rows, limit int, scan func() (a notify.Attempt, ok bool, err error)) (notify.AttemptPage, error) {
	found := false
	out := []notify.Attempt{}
	for rows.Next() {
		found = true
		a, ok, err := scan()
		if err != nil {
			return notify.AttemptPage{}, err
		}
		if ok {
			out = append(out, a)
		}
	}
	if err := rows.Err(); err != nil {
		return notify.AttemptPage{}, err
	}
	if !found {
		return notify.AttemptPage{}, notify.ErrNotFound
	}
	return notify.CutAttempts(out, limit), nil
}

// Templates groups rows of templates' variants, ordered by name, into
// templates. scan reads the current row: a variant and its template's
// latest version.
func Templates(rows Rows, scan func() (v notify.TemplateVersion, latest int, err error)) ([]notify.Template, error) {
	var out []notify.Template
	for rows.Next() {
		v, latest, err := scan()
		if err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Name != v.Name {
			out = append(out, notify.Template{Name: v.Name, Latest: latest})
		}
		out[len(out)-1].Variants = append(out[len(out)-1].Variants, v)
	}
	return out, rows.Err()
}
