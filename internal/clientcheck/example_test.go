package clientcheck_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/client"
)

func Example() {
	h := startHerald() // a real herald API, token "s3cret"
	defer h.Close()
	ctx := context.Background()

	c, err := client.New(h.URL, client.WithToken("s3cret"))
	if err != nil {
		panic(err)
	}
	created, err := c.Create(ctx, client.CreateRequest{
		UserID: "u-42", Channel: "email", To: "Ada <ada@example.com>",
		Subject: "Shipped", Body: "Your order is on its way.",
		IdempotencyKey: "order-1234-shipped",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(created.ID, created.Status, created.To, created.Replayed)

	// The same key with the same request: the same notification.
	again, err := c.Create(ctx, client.CreateRequest{
		UserID: "u-42", Channel: "email", To: "Ada <ada@example.com>",
		Subject: "Shipped", Body: "Your order is on its way.",
		IdempotencyKey: "order-1234-shipped",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(again.ID, again.Replayed)

	n, err := c.Get(ctx, created.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %q %q\n", n.Status, n.Subject, n.Body)
	// Output:
	// 1 pending Ada <ada@example.com> false
	// 1 true
	// pending "Shipped" "Your order is on its way."
}

// Errors carry the API's code and the field at fault.
func Example_errors() {
	h := startHerald()
	defer h.Close()
	c, _ := client.New(h.URL, client.WithToken("s3cret"))

	_, err := c.Create(context.Background(), client.CreateRequest{UserID: "u-42", Channel: "email", To: "not an address", Subject: "Hi", Body: "Hello"})
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, apiErr.Code, apiErr.Field)
	}
	_, err = c.Get(context.Background(), "999")
	if errors.As(err, &apiErr) && apiErr.Code == client.CodeNotFound {
		fmt.Println("no notification 999")
	}
	// Output:
	// 400 invalid_field to
	// no notification 999
}

// ListAll walks every page of a listing.
func Example_listAll() {
	h := startHerald()
	defer h.Close()
	ctx := context.Background()
	c, _ := client.New(h.URL, client.WithToken("s3cret"))
	for i := range 5 {
		_, err := c.Create(ctx, client.CreateRequest{UserID: "u-7", Channel: "email", To: "bo@example.com", Subject: fmt.Sprint("news ", i), Body: "..."})
		if err != nil {
			panic(err)
		}
	}
	// Two a page: three requests, every notification once, newest first.
	for n, err := range c.ListAll(ctx, client.ListOptions{UserID: "u-7", Limit: 2}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(n.ID, n.Subject)
	}
	// Output:
	// 5 news 4
	// 4 news 3
	// 3 news 2
	// 2 news 1
	// 1 news 0
}

// Redrive sends dead letters again; their last_error is cleared, and the
// attempts keep the history.
func Example_redrive() {
	h := startHerald()
	defer h.Close()
	ctx := context.Background()
	c, _ := client.New(h.URL, client.WithToken("s3cret"))
	n, err := c.Create(ctx, client.CreateRequest{UserID: "u-1", Channel: "email", To: "gone@example.com", Subject: "Hi", Body: "Hello"})
	if err != nil {
		panic(err)
	}
	h.fail(1, "550 5.1.1 no such user") // as a worker does after its last try

	for d, err := range c.AllDeadLetters(ctx, client.DeadLetterOptions{Error: "no such user"}) {
		if err != nil {
			panic(err)
		}
		fmt.Println("dead:", d.ID, d.To, d.LastError)
	}
	res, err := c.Redrive(ctx, client.RedriveRequest{IDs: []string{n.ID, "999"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("redriven:", res.Redriven, "skipped:", res.Skipped)

	again, _ := c.Get(ctx, n.ID)
	attempts, _ := c.Attempts(ctx, n.ID)
	fmt.Printf("%s last_error=%q; attempt 1: %s %s\n", again.Status, again.LastError, attempts[0].Outcome, attempts[0].Error)
	// Output:
	// dead: 1 gone@example.com 550 5.1.1 no such user
	// redriven: [1] skipped: [{999 not_found}]
	// pending last_error=""; attempt 1: dead 550 5.1.1 no such user
}
