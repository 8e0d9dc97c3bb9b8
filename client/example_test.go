package client_test

// These examples show the calls; the server's module runs the same ones
// against a real herald with their output checked (internal/clientcheck).

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/heraldhq/herald/client"
)

func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("HERALD_API_TOKEN")))
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
	fmt.Println(created.ID, created.Status, created.To, created.Replayed) // 1 pending Ada <ada@example.com> false

	// The same key with the same request: the same notification.
	again, err := c.Create(ctx, client.CreateRequest{
		UserID: "u-42", Channel: "email", To: "Ada <ada@example.com>",
		Subject: "Shipped", Body: "Your order is on its way.",
		IdempotencyKey: "order-1234-shipped",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(again.ID, again.Replayed) // 1 true

	n, err := c.Get(ctx, created.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %q %q\n", n.Status, n.Subject, n.Body) // pending "Shipped" "Your order is on its way."
}

// Errors carry the API's code and the field at fault.
func ExampleError() {
	c, _ := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("HERALD_API_TOKEN")))

	_, err := c.Create(context.Background(), client.CreateRequest{UserID: "u-42", Channel: "email", To: "not an address", Subject: "Hi", Body: "Hello"})
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, apiErr.Code, apiErr.Field) // 400 invalid_field to
	}
	_, err = c.Get(context.Background(), "999")
	if errors.As(err, &apiErr) && apiErr.Code == client.CodeNotFound {
		fmt.Println("no notification 999")
	}
}

// ListAll walks every page of a listing, newest first.
func ExampleClient_ListAll() {
	c, _ := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("HERALD_API_TOKEN")))
	for n, err := range c.ListAll(context.Background(), client.ListOptions{UserID: "u-7", Limit: 2}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(n.ID, n.Subject)
	}
}

// Redrive sends dead letters again; their last_error is cleared, and the
// attempts keep the history.
func ExampleClient_Redrive() {
	ctx := context.Background()
	c, _ := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("HERALD_API_TOKEN")))
	var ids []string
	for d, err := range c.AllDeadLetters(ctx, client.DeadLetterOptions{Error: "no such user"}) {
		if err != nil {
			panic(err)
		}
		ids = append(ids, d.ID)
	}
	res, err := c.Redrive(ctx, client.RedriveRequest{IDs: ids})
	if err != nil {
		panic(err)
	}
	fmt.Println("redriven:", res.Redriven, "skipped:", res.Skipped)
}
