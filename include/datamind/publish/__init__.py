"""Publishing: judged rows -> rule filters -> a versioned, immutable dataset release with a manifest."""
