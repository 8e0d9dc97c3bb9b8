package mongo_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The plans of the store's queries, as the server explains them. Every
// change of a notification loads and replaces it by _id; on FerretDB v1
// (SQLite) only a string _id filter is pushed down to its primary key (a
// number is filtered after reading every document), which is why _id is
// the id as 19 digits. The listing's and the due events' filters are not
// pushed down by FerretDB v1 at all (it reads the collection); on MongoDB
// the migrations' indexes (list_idx, list_channel_idx, due_rank_idx, ...)
// serve them. Run with -v to see the plans.
func TestExplain(t *testing.T) {
	t.Parallel()
	_, db := openMigrated(t)
	explain := func(filter bson.D, sort bson.D) bson.M {
		t.Helper()
		var ex bson.M
		cmd := bson.D{{Key: "find", Value: "notifications"}, {Key: "filter", Value: filter}}
		if sort != nil {
			cmd = append(cmd, bson.E{Key: "sort", Value: sort})
		}
		require.NoError(t, db.RunCommand(t.Context(), bson.D{{Key: "explain", Value: cmd}}).Decode(&ex))
		t.Logf("filter %v sort %v: %v", filter, sort, ex["queryPlanner"])
		return ex
	}
	byKey := explain(bson.D{{Key: "_id", Value: "0000000000000000042"}}, nil)
	byNumber := explain(bson.D{{Key: "_id", Value: int64(42)}}, nil)
	if _, ferret := byKey["filterPushdown"]; ferret {
		require.Equal(t, true, byKey["filterPushdown"], "a string _id filter is served by the primary key")
		require.Equal(t, false, byNumber["filterPushdown"], "FerretDB still scans for a numeric _id (if this fails, it no longer does)")
	}
	explain(bson.D{{Key: "rank", Value: 0}, {Key: "due", Value: bson.D{{Key: "$lte", Value: int64(0)}}}},
		bson.D{{Key: "rank", Value: 1}, {Key: "due", Value: 1}, {Key: "_id", Value: 1}})
	explain(bson.D{{Key: "user_id", Value: "u"}}, bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}})
	explain(bson.D{{Key: "channel", Value: "webhook"}}, bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}})
	explain(bson.D{{Key: "status", Value: "sent"}, {Key: "created_at", Value: bson.D{{Key: "$gte", Value: int64(0)}}}}, nil)
}
