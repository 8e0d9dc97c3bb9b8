module github.com/heraldhq/herald/client

go 1.23
