package console

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// misplacedValues is a script listing, on the current page, the parts of a
// value that lie outside the viewport or, in a list's card (a narrow
// screen: the label beside its value), inside the label's column, the
// first 7rem of the row. It measures the value's text and elements
// themselves (a Range over the cell's content), not the cell.
const misplacedValues = `(() => {
	const rem = parseFloat(getComputedStyle(document.documentElement).fontSize);
	const vw = document.documentElement.clientWidth;
	const out = [];
	const check = (el, labelEnd, what) => {
		const r = document.createRange();
		r.selectNodeContents(el);
		for (const b of r.getClientRects()) {
			if (b.width === 0) continue;
			if (b.left < labelEnd - 0.5 || b.right > vw + 0.5) {
				out.push(what + ": [" + Math.round(b.left) + ", " + Math.round(b.right) + "] label column ends at " + Math.round(labelEnd) + ", viewport " + vw);
			}
		}
	};
	const narrow = getComputedStyle(document.querySelector("table.list thead") || document.body).position === "absolute";
	for (const td of document.querySelectorAll("table.list td[data-label]")) {
		const left = td.getBoundingClientRect().left;
		check(td, narrow ? left + 7 * rem : left, td.dataset.label + " " + JSON.stringify(td.textContent.trim()));
	}
	for (const dd of document.querySelectorAll(".facts dd")) {
		const dt = dd.previousElementSibling.getBoundingClientRect();
		// Beside its term (wide) or under it (narrow), never across it.
		const under = dd.getBoundingClientRect().top >= dt.bottom - 0.5;
		check(dd, under ? 0 : dt.right, "fact " + JSON.stringify(dd.previousElementSibling.textContent));
	}
	return out;
})()`

// TestConsoleFirstHour covers what an operator meets in the console's
// first hour (issue 38): a failed notification redriven from its own page,
// the confirmation naming it; who and which channel a dead letter was for;
// a time axis on the chart; date inputs for the list's time filters; a
// narrow screen keeping values out of the labels' column.
func TestConsoleFirstHour(t *testing.T) {
	go startBrowser(chromium(t))
	s := startHerald(t)
	b := newTab(t)
	b.do(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		// The browser is far from UTC: what says UTC must stay UTC.
		_, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"})
		return err
	}))

	s.smtp.Fail(550, "5.1.1 mailbox unavailable")
	dead := s.create(t, "u-firsthour", "gone@example.com", "Your invoice")
	s.waitStatus(t, dead, "failed")
	s.smtp.Fail(0, "")
	b.login(s)

	t.Run("dead letters show the user and the channel", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/dead-letters"))
		heads := js[[]string](b, `Array.from(document.querySelectorAll("#deadletters thead th")).map(e => e.textContent.trim())`)
		require.Subset(t, heads, []string{"User", "Channel"})
		row := `#deadletters tbody tr:has(a[href="/ui/notifications/` + dead + `"]) `
		require.Equal(t, "u-firsthour", strings.TrimSpace(b.text(row+`td[data-label=User]`)))
		require.Equal(t, "email", strings.TrimSpace(b.text(row+`td[data-label=Channel]`)))
	})

	t.Run("the chart has a time axis in UTC", func(t *testing.T) {
		b.t = t
		before := time.Now().UTC()
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/"))
		after := time.Now().UTC()
		labels := js[[]string](b, `Array.from(document.querySelectorAll("figure.chart svg text")).map(e => e.textContent.trim())`)
		// An hour holds six minutes of the clock that end in 0.
		require.Len(t, labels, 6, "%q", labels)
		for _, l := range labels {
			require.Regexp(t, regexp.MustCompile(`^\d\d:\d0$`), l)
		}
		// The last tick is the latest ten minutes of the clock, in UTC (the
		// browser is in Tokyo, 9 hours ahead).
		last := labels[len(labels)-1]
		require.Contains(t, []string{before.Truncate(10 * time.Minute).Format("15:04"), after.Truncate(10 * time.Minute).Format("15:04")}, last)
		require.Contains(t, b.text("figure.chart figcaption"), "UTC")
		for _, width := range []int64{1280, 360} {
			b.do(chromedp.EmulateViewport(width, 740))
			// The labels lie inside the chart, in order, none over another.
			overlaps := js[[]string](b, `(() => {
				const svg = document.querySelector("figure.chart > svg").getBoundingClientRect();
				const rs = Array.from(document.querySelectorAll("figure.chart svg text")).map(e => e.getBoundingClientRect());
				const out = [];
				rs.forEach((r, i) => {
					if (r.width === 0 || r.left < svg.left - 0.5 || r.right > svg.right + 0.5) out.push("label " + i + " outside the chart");
					if (i > 0 && r.left < rs[i-1].right + 2) out.push("label " + i + " over label " + (i-1));
				});
				return out;
			})()`)
			require.Empty(t, overlaps, "at %d px", width)
		}
		b.do(chromedp.EmulateViewport(1280, 900))
	})

	t.Run("the date inputs filter the list", func(t *testing.T) {
		b.t = t
		// Two notifications either side of a second of the clock: the
		// inputs take seconds.
		var first struct {
			CreatedAt time.Time `json:"created_at"`
		}
		older := s.create(t, "u-dates", "older@example.com", "Older")
		require.Equal(t, http.StatusOK, s.call(t, http.MethodGet, "/notifications/"+older, nil, &first))
		split := first.CreatedAt.UTC().Truncate(time.Second).Add(time.Second)
		require.Eventually(t, func() bool { return time.Now().After(split) }, 5*time.Second, 20*time.Millisecond)
		newer := s.create(t, "u-dates", "newer@example.com", "Newer")

		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications"))
		for _, id := range []string{"created_after", "created_before"} {
			require.Equal(t, "datetime-local", js[string](b, `document.querySelector("#`+id+`").type`))
			require.Contains(t, b.text(`label[for=`+id+`]`), "UTC", "the label says how the input is read")
		}
		require.Empty(t, b.unlabelled())
		ids := func() []string {
			return js[[]string](b, `Array.from(document.querySelectorAll("#notifications tbody td[data-label=ID]")).map(e => e.textContent.trim())`)
		}
		local := split.Format("2006-01-02T15:04:05")
		b.do(chromedp.SetValue(chromedp.CSS("#user_id"), "u-dates"), chromedp.SetValue(chromedp.CSS("#created_after"), local))
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("form.filters button"))))
		require.Equal(t, []string{newer}, ids(), "created at or after %s UTC", local)
		require.Equal(t, local, js[string](b, `document.querySelector("#created_after").value`), "the input keeps its value")

		b.do(chromedp.SetValue(chromedp.CSS("#created_after"), ""), chromedp.SetValue(chromedp.CSS("#created_before"), local))
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("form.filters button"))))
		require.Equal(t, []string{older}, ids(), "created before %s UTC", local)

		// A link with the RFC 3339 of before still works, and fills the
		// input in UTC.
		rfc := split.In(time.FixedZone("", 2*3600)).Format(time.RFC3339)
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications?user_id=u-dates&created_after="+strings.ReplaceAll(rfc, "+", "%2B")))
		require.Equal(t, []string{newer}, ids())
		require.Equal(t, local, js[string](b, `document.querySelector("#created_after").value`))
		// One the input cannot hold is refused, quoted next to it.
		require.Equal(t, http.StatusBadRequest, b.nav(s.url+"/ui/notifications?created_after=yesterday"))
		require.Contains(t, b.text("#created_after + .field-error"), `created_after must be an RFC 3339 time`)
		require.Contains(t, b.text("#created_after + .field-error"), `"yesterday"`)
	})

	t.Run("at 360 px values stay out of the labels' column", func(t *testing.T) {
		b.t = t
		b.do(chromedp.EmulateViewport(360, 740))
		defer b.do(chromedp.EmulateViewport(1280, 900))
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications/"+dead))
		msgID := "<" + dead + "@example.com>"
		require.Equal(t, msgID, b.text("#message-id"))
		require.Contains(t, b.text("#attempts"), msgID)
		require.Empty(t, js[[]string](b, misplacedValues))
		b.screenshot("detail-360")
		for _, path := range []string{"/ui/dead-letters", "/ui/notifications?user_id=u-firsthour"} {
			require.Equal(t, http.StatusOK, b.nav(s.url+path))
			require.Empty(t, js[[]string](b, misplacedValues), path)
		}
	})

	t.Run("redrive from a failed notification's page", func(t *testing.T) {
		b.t = t
		require.Equal(t, http.StatusOK, b.nav(s.url+"/ui/notifications/"+dead))
		require.Equal(t, "failed", strings.TrimSpace(b.text("#status")))
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#redrive"))))
		require.Contains(t, b.text("#confirm-count"), "1 notification will be sent again")
		require.Equal(t, "Notification "+dead+".", strings.TrimSpace(b.text("#confirm-ids")), "the confirmation names it")
		require.Equal(t, "failed", s.status(t, dead), "the confirmation changes nothing")
		// The mail server now defers: the redriven notification stays
		// pending, retried later.
		s.smtp.Fail(451, "4.3.0 try again later")
		defer s.smtp.Fail(0, "")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#confirm"))))
		require.Contains(t, b.text("#result-summary"), "1 redriven, 0 skipped")
		require.Contains(t, b.text("#result"), dead)
		require.Contains(t, b.text("#result .result"), "pending again")
		s.waitStatus(t, dead, "pending")
		require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#back"))))
		require.Equal(t, "/ui/notifications/"+dead, b.location())
		require.Equal(t, "pending", strings.TrimSpace(b.text("#status")))
		require.Contains(t, b.text("#history"), "redriven")
		require.Equal(t, "", b.text("#redrive"), "no Redrive button on a notification that is not failed")
	})
}
