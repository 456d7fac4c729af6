"""Where records come from, read into the rules' ``KafkaRecord``: MSK events (``msk``), files
(``files``), and values in a schema registry's format (``formats``)."""
