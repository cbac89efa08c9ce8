"""Built-in task types. Importing this package registers every one of them."""
