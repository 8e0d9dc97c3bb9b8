package main
import (
 _ "github.com/jackc/pgx/v5"
 _ "github.com/jackc/pgx/v5/pgxpool"
 _ "github.com/rabbitmq/amqp091-go"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "modernc.org/sqlite"
 _ "github.com/stretchr/testify/require"
 _ "github.com/emersion/go-smtp"
 _ "golang.org/x/sync/errgroup"
)
func main(){}
