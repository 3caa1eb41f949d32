"""The book catalog the shop serves (read-only; the shop keeps no server-side state)."""

BOOKS = [
    {"id": 1, "title": "The Pragmatic Programmer", "author": "Hunt & Thomas", "year": 1999, "price": 39.5},
    {"id": 2, "title": "Structure and Interpretation of Computer Programs", "author": "Abelson & Sussman", "year": 1985, "price": 55.0},
    {"id": 3, "title": "The Art of Computer Programming", "author": "Knuth", "year": 1968, "price": 199.99},
    {"id": 4, "title": "Refactoring", "author": "Fowler", "year": 1999, "price": 47.25},
    {"id": 5, "title": "Design Patterns", "author": "Gamma, Helm, Johnson & Vlissides", "year": 1994, "price": 54.99},
    {"id": 6, "title": "Working Effectively with Legacy Code", "author": "Feathers", "year": 2004, "price": 49.0},
    {"id": 7, "title": "The Mythical Man-Month", "author": "Brooks", "year": 1975, "price": 29.95},
    {"id": 8, "title": "Programming Pearls", "author": "Bentley", "year": 1986, "price": 32.0},
    {"id": 9, "title": "Code Complete", "author": "McConnell", "year": 1993, "price": 44.5},
    {"id": 10, "title": "Clean Architecture", "author": "Martin", "year": 2017, "price": 34.99},
    {"id": 11, "title": "Domain-Driven Design", "author": "Evans", "year": 2003, "price": 59.0},
    {"id": 12, "title": "Types and Programming Languages", "author": "Pierce", "year": 2002, "price": 72.0},
]
