"""Configuration: the seed's two file formats (JSON, TOML) validated once into one typed ``TestConfig``,
and endpoint URL resolution."""
